"""Property: whatever the order of events, losses, crashes and restarts, once the network settles
exactly one leader is known by every live node, and it is the highest live id."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthchecker.bully import Role
from tests.unit.healthchecker.election_sim import CONFIG_DEFAULTS, Cluster

SETTLE_S = 4 * (
    CONFIG_DEFAULTS["healthcheck_interval_s"] * CONFIG_DEFAULTS["healthcheck_misses_max"]
    + CONFIG_DEFAULTS["answer_timeout_s"]
    + CONFIG_DEFAULTS["coordinator_timeout_s"]
    + CONFIG_DEFAULTS["announce_interval_s"]
)

fraction = st.floats(min_value=0.0, max_value=1.0, allow_nan=False, exclude_max=True)
operation = st.one_of(
    st.tuples(st.just("deliver"), fraction),
    st.tuples(st.just("drop"), fraction),
    st.tuples(st.just("tick"), fraction, st.floats(min_value=0.0, max_value=1.5)),
    st.tuples(st.just("tick_all"), st.floats(min_value=0.0, max_value=1.5)),
    st.tuples(st.just("isolate"), fraction, st.floats(min_value=0.0, max_value=1.5)),
    st.tuples(st.just("drop_all")),
    st.tuples(st.just("crash"), fraction),
    st.tuples(st.just("restart"), fraction),
)


def _pick(sequence, position: float):
    return sequence[int(position * len(sequence))]


def _apply(cluster: Cluster, op) -> None:
    kind = op[0]
    if kind in ("deliver", "drop"):
        if cluster.in_flight:
            index = int(op[1] * len(cluster.in_flight))
            (cluster.deliver if kind == "deliver" else cluster.drop)(index)
    elif kind == "tick":
        cluster.advance(op[2])
        cluster.tick(_pick(cluster.ids, op[1]))
    elif kind == "tick_all":
        cluster.advance(op[1])
        cluster.tick()
    elif kind == "isolate":  # one time step in which every packet to or from one node is lost
        node = _pick(cluster.ids, op[1])
        cluster.advance(op[2])
        cluster.tick()
        cluster.deliver_all(lose=lambda packet: node in (packet.to, packet.sender))
    elif kind == "drop_all":
        cluster.in_flight.clear()
    elif kind == "crash":
        cluster.crash(_pick(cluster.ids, op[1]))
    else:
        cluster.start(_pick(cluster.ids, op[1]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.integers(min_value=1, max_value=50), min_size=2, max_size=5, unique=True),
    initially_up=st.lists(st.booleans(), min_size=5, max_size=5),
    operations=st.lists(operation, max_size=60),
)
def test_settled_network_knows_exactly_the_highest_live_leader(ids, initially_up, operations):
    cluster = Cluster.of(ids)
    for node, up in zip(ids, initially_up, strict=False):
        if up:
            cluster.start(node)
    for op in operations:
        _apply(cluster, op)
    if not cluster.alive:
        cluster.start(min(ids))

    cluster.run(SETTLE_S, step_s=0.1)

    highest = max(cluster.alive)
    assert cluster.leaders() == {highest}
    assert set(cluster.known_leaders().values()) == {highest}
    assert all(cluster.role(n) is Role.FOLLOWER for n in cluster.alive if n != highest)

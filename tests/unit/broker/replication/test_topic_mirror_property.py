"""The topic mirror (topic_mirror.py) over simulated replication groups: three brokers run a
metadata group and two data groups, each group a `raft_sim.Simulation` of its own (its own
journal, elections, network: drops, duplicates, delays, partitions, paused leaders), on one
clock. A broker crash takes down all its groups at once and they restart together, their
commit index anywhere up to what they had. `ClusterFaults` adds what strikes the cluster as a
whole: those crashes, link cuts between two brokers in every group at once (a broker cut off
from the metadata group's leader but not from a data group's falls behind in the one only),
and data group hand-overs to a random voter (as leader_balance.py does); the LAGGARD campaign
so puts data group leadership on brokers whose copy of the metadata group lags.

Admins create and delete topics `t0`/`t1` in the metadata group (the simulator's topic ops);
producers write data in every group. After every round, whoever leads a data group on a
broker runs the mirror's real `decide` on that broker's copy of the metadata group (its
committed prefix, often behind the cluster's) and on its own journal, and appends what it
says: an open carrying the metadata incarnation's id, or a close carrying the id it closes and
the end of the metadata prefix it was decided on. The group's watermark (the largest metadata
prefix end its entries carry: an open's id index + 1, a close's prefix end) is read from its
journal, as CommittedTopics reads it from a real one.

Checked (`MirrorViolation` on the first breach), besides every Raft invariant the simulator
checks in each group:
- an open names an incarnation that the metadata group created and committed;
- a close names an incarnation that the metadata group has deleted, committed: a lagging
  leader never closes what a better-informed one opened (the data in it would be lost);
- an open never names an incarnation the group has closed (a close in its committed history),
  nor one whose delete lies in the metadata prefix the group's committed entries have acted
  on (below their largest carried prefix end): a leader whose copy of the metadata group
  lags -- restarted with a stale commit index, or a follower that has not heard of the latest
  commit when the group's leadership moves to it -- would accept writes into it and lose them
  once its copy catches up;
- convergence: once the faults stop, every broker's committed copy of each data group holds
  exactly the metadata group's committed topics, each with the metadata incarnation's id.
"""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.broker.replication.committed_topics import LiveTopic, TopicsView
from services.broker.replication.journal import TopicId
from services.broker.replication.raft import LogChanged, Role
from services.broker.replication.topic_mirror import CloseTopic, OpenTopic, decide
from tests.unit.broker.replication.raft_sim import PROFILES, Faults, Simulation, topic_op

IDS = (1, 2, 3)
GROUPS = 3
ROUNDS = 1200
CONVERGE_S = 120.0


class MirrorViolation(AssertionError):
    """The mirror appended something the metadata group does not vouch for, or never
    converged."""


@dataclasses.dataclass
class MirrorStats:
    opens: int = 0
    closes: int = 0
    broker_crashes: int = 0
    stale_views: int = 0  # mirror rounds on a copy of the metadata group behind the cluster's
    stale_holds: int = 0  # incarnations a stale view had to leave open (not yet known dead)
    # Mirror rounds at a leader whose copy of the metadata group shows live an incarnation the
    # group has closed (what must not be opened again).
    stale_closed: int = 0


def _carried(payload: str) -> TopicId:
    """The metadata incarnation an open's or a close's payload carries:
    `m<n>#<epoch>.<index>+<topic>` or `m<n>#<epoch>.<index>@<metadata end>-<topic>`."""
    epoch, index = re.split(r"[+@]", payload.split("#", 1)[1], maxsplit=1)[0].split(".")
    return TopicId(int(epoch), int(index))


def _metadata_end_seen(payload: str) -> int:
    """The metadata prefix end a data group's entry was decided on (journal.py's
    `metadata_end_seen`): an open's carried index + 1, a close's carried end."""
    kind, _topic = topic_op(payload)
    if kind == "create":
        return _carried(payload).index + 1
    if kind == "delete":
        return int(payload.split("@", 1)[1].split("-", 1)[0])
    return 0


def metadata_view(entries, commit: int) -> TopicsView:
    """The live topics of a metadata journal's first `commit` entries, named by the
    (epoch, index) of their create."""
    topics: dict[str, LiveTopic] = {}
    for index, (epoch, payload) in enumerate(entries[:commit]):
        kind, topic = topic_op(payload)
        if kind == "create":
            topics[topic] = LiveTopic(TopicId(epoch, index), 1)
        elif kind == "delete":
            topics.pop(topic, None)
    return TopicsView(min(commit, len(entries)), topics)


def data_view(entries, commit: int) -> TopicsView:
    """A data group's pending view: its whole journal, each open naming what it carries;
    `deleting`: the topics whose close lies past `commit`."""
    topics: dict[str, LiveTopic] = {}
    deleting: set[str] = set()
    metadata_end_seen = 0
    for index, (_epoch, payload) in enumerate(entries):
        kind, topic = topic_op(payload)
        metadata_end_seen = max(metadata_end_seen, _metadata_end_seen(payload))
        if kind == "create":
            topics[topic] = LiveTopic(_carried(payload), 1)
            deleting.discard(topic)
        elif kind == "delete":
            topics.pop(topic, None)
            if index >= commit:
                deleting.add(topic)
    return TopicsView(len(entries), topics, frozenset(deleting), metadata_end_seen)


def _deleted_at(committed, action: OpenTopic) -> int | None:
    """The index of the metadata group's committed delete of the incarnation `action` opens;
    None while it lives."""
    for index in range(action.topic_id.index + 1, len(committed)):
        kind, topic = topic_op(committed[index][1])
        if topic == action.topic and kind is not None:
            return index if kind == "delete" else None
    return None


def _live_ids(view: TopicsView) -> dict[str, TopicId]:
    return {name: live.topic_id for name, live in view.topics.items()}


@dataclasses.dataclass(frozen=True)
class ClusterFaults:
    """The faults of the cluster as a whole, on top of each group's own (`Faults`)."""

    broker_crash: float = 0.004  # per broker and round: all its groups die together
    # Per round: cut one link between two brokers (or heal), in every group at once, for up
    # to link_cut_max_s: a broker cut off from the metadata group's leader but not from a
    # data group's falls behind in the one and keeps up in the other.
    link_cut: float = 0.0
    link_cut_max_s: float = 6.0
    # Per round and data group leader: hand the group over (as leader_balance.py does) to a
    # random voter or the best caught-up one -- often a broker whose metadata copy lags.
    data_transfer: float = 0.0


# Leadership of the data groups wanders to brokers whose copy of the metadata group lags.
LAGGARD = ClusterFaults(broker_crash=0.006, link_cut=0.03, data_transfer=0.02)


class GroupsSimulation:
    def __init__(self, seed: int, faults: Faults, topic_ops: float = 0.4,
                 cluster: ClusterFaults | None = None) -> None:
        self.rng = random.Random(seed)
        self.cluster = cluster or ClusterFaults()
        self.broker_crash = self.cluster.broker_crash
        self.dt_max_s = faults.dt_max_s
        # A process dies whole: crashes are the brokers' (below), not one group's.
        per_group = dataclasses.replace(faults, crash=0.0, leader_crash=0.0,
                                        crash_mid_step=0.0, wipe=0.0, compact=0.0)
        if self.cluster.link_cut:
            per_group = dataclasses.replace(per_group, partition=0.0)  # the cluster's cuts
        self.sims = [Simulation(IDS, seed=self.rng.getrandbits(32), faults=dataclasses.replace(
            per_group, topic_ops=topic_ops if group == 0 else 0.0,
            transfer=self.cluster.data_transfer if group else 0.0)) for group in range(GROUPS)]
        self.metadata = self.sims[0]
        self.stats = MirrorStats()
        self._payloads = 0
        # Per data group, read from its committed entries so far: (entries read, the
        # incarnations it closed, the largest metadata prefix end they carry).
        self._history: dict[int, tuple[int, frozenset[TopicId], int]] = {
            group: (0, frozenset(), 0) for group in range(1, GROUPS)}

    def round(self) -> None:
        self._maybe_crash()
        self._maybe_cut()
        dt_s = self.rng.uniform(0.0, self.dt_max_s)
        for sim in self.sims:
            sim.round(dt_s)
        for group in range(1, GROUPS):
            for node_id in IDS:
                self.mirror(group, node_id)

    def _maybe_crash(self) -> None:
        for node_id in IDS:
            if not self.metadata.nodes[node_id].up or self.rng.random() >= self.broker_crash:
                continue
            self.stats.broker_crashes += 1
            down_until = self.metadata.now + self.rng.uniform(0.0, 4.0)
            for sim in self.sims:
                sim.crash(node_id)
                sim.nodes[node_id].down_until = down_until

    def _maybe_cut(self) -> None:
        if not self.cluster.link_cut or self.rng.random() >= self.cluster.link_cut:
            return
        ids = list(IDS)
        kind = self.rng.randrange(3)
        if kind == 0:
            alone = self.rng.choice(ids)
            cut = {frozenset((alone, other)) for other in ids if other != alone}
        elif kind == 1:
            cut = {frozenset(self.rng.sample(ids, 2))}
        else:
            cut = set()  # healed
        until = self.metadata.now + self.rng.uniform(0.5, self.cluster.link_cut_max_s)
        for sim in self.sims:
            sim.cut, sim.cut_until = set(cut), until

    def mirror(self, group: int, node_id: int) -> None:
        """What TopicMirror.round_once does on broker `node_id` for `group`."""
        sim = self.sims[group]
        node, metadata_node = sim.nodes[node_id], self.metadata.nodes[node_id]
        if not node.up or not metadata_node.up or sim.now < node.paused_until:
            return
        state = node.state
        if state.role is not Role.LEADER or state.transfer_to is not None:
            return
        metadata = metadata_view(metadata_node.journal, metadata_node.state.commit)
        if metadata.end < len(self.metadata.committed):
            self.stats.stale_views += 1
        mine = data_view(node.journal, state.commit)
        closed, _acted_on = self._closed_and_acted_on(group)
        if any(live.topic_id in closed for live in metadata.topics.values()):
            self.stats.stale_closed += 1
        for name, live in mine.topics.items():
            truth = metadata_view(self.metadata.committed, len(self.metadata.committed))
            if name not in truth.topics and live.topic_id.index >= metadata.end:
                self.stats.stale_holds += 1
        for action in decide(metadata, mine, lambda _topic, _partitions: True):
            self._check(action, group, node_id)
            self._payloads += 1
            carried = action.topic_id
            mark = "+" if isinstance(action, OpenTopic) else f"@{action.metadata_end}-"
            payload = f"m{self._payloads}#{carried.epoch}.{carried.index}{mark}{action.topic}"
            sim._append(node, (state.epoch, payload))
            sim._step(node, LogChanged(node.view()))
            if not node.up or node.state.role is not Role.LEADER:
                return

    def _check(self, action, group: int, node_id: int) -> None:
        committed = self.metadata.committed
        topic_id = action.topic_id
        created = (topic_id.index < len(committed)
                   and committed[topic_id.index][0] == topic_id.epoch
                   and topic_op(committed[topic_id.index][1]) == ("create", action.topic))
        if not created:
            raise MirrorViolation(f"group {group} at broker {node_id}: {action} names no "
                                  "committed create of the metadata group")
        if isinstance(action, OpenTopic):
            self._check_open(action, group, node_id)
            self.stats.opens += 1
            return
        self.stats.closes += 1
        deleted = any(topic_op(payload) == ("delete", action.topic)
                      for _epoch, payload in committed[topic_id.index + 1:])
        if not deleted:
            raise MirrorViolation(f"group {group} at broker {node_id}: {action} closes an "
                                  "incarnation the metadata group has not deleted")
        assert isinstance(action, CloseTopic)

    def _check_open(self, action: OpenTopic, group: int, node_id: int) -> None:
        closed, acted_on = self._closed_and_acted_on(group)
        if action.topic_id in closed:
            raise MirrorViolation(f"group {group} at broker {node_id}: {action} re-opens an "
                                  "incarnation the group closed")
        deleted_at = _deleted_at(self.metadata.committed, action)
        if deleted_at is not None and deleted_at < acted_on:
            raise MirrorViolation(
                f"group {group} at broker {node_id}: {action} opens an incarnation deleted at "
                f"metadata index {deleted_at}, in the prefix up to {acted_on} the group's "
                "committed entries acted on")

    def _closed_and_acted_on(self, group: int) -> tuple[frozenset[TopicId], int]:
        """The incarnations the group's committed entries closed, and the largest metadata
        prefix end they carry."""
        read, closed, acted_on = self._history[group]
        committed = self.sims[group].committed
        if read < len(committed):
            fresh = committed[read:]
            closed = closed | {_carried(payload) for _epoch, payload in fresh
                               if topic_op(payload)[0] == "delete"}
            acted_on = max([acted_on, *(_metadata_end_seen(payload) for _e, payload in fresh)])
            self._history[group] = (len(committed), closed, acted_on)
        return closed, acted_on

    def settle_and_converge(self) -> float:
        """Stop the faults; run until every broker's committed copy of each data group holds
        the metadata group's committed topics; the simulated seconds it took."""
        for sim in self.sims:
            sim.settle()
        self.broker_crash = 0.0
        self.cluster = dataclasses.replace(self.cluster, link_cut=0.0)
        start = self.metadata.now
        while self.metadata.now - start < CONVERGE_S:
            self.round()
            if self._converged():
                return self.metadata.now - start
        raise MirrorViolation(f"not converged {CONVERGE_S:.0f} s after healing: "
                              f"{self._copies()}")

    def _converged(self) -> bool:
        truth = _live_ids(metadata_view(self.metadata.committed, len(self.metadata.committed)))
        if any(self.metadata.nodes[n].state.commit < len(self.metadata.committed) for n in IDS):
            return False
        return all(_live_ids(data_view(sim.nodes[n].journal[:sim.nodes[n].state.commit],
                                       sim.nodes[n].state.commit)) == truth
                   for sim in self.sims[1:] for n in IDS)

    def _copies(self) -> dict:
        return {(group, n): _live_ids(data_view(sim.nodes[n].journal[:sim.nodes[n].state.commit],
                                                sim.nodes[n].state.commit))
                for group, sim in enumerate(self.sims) if group for n in IDS} | {
            "metadata": _live_ids(metadata_view(self.metadata.committed,
                                                len(self.metadata.committed)))}


def _campaign(seeds, faults: Faults, cluster: ClusterFaults | None = None) -> MirrorStats:
    total = MirrorStats()
    for seed in seeds:
        simulation = GroupsSimulation(seed, faults, cluster=cluster)
        for _ in range(ROUNDS):
            simulation.round()
        simulation.settle_and_converge()
        for field in dataclasses.fields(MirrorStats):
            setattr(total, field.name,
                    getattr(total, field.name) + getattr(simulation.stats, field.name))
    return total


# Per campaign: its faults, and (opens, closes, stale holds, stale closed) at least over the six
# seeds: not vacuous. A lossy network commits little, but its leaders lag the most: a data
# group holds incarnations their copy of the metadata group has not seen yet (what must not be
# closed). Under LAGGARD, leaders whose copy shows live what the group closed (what must not be
# opened again) are common.
CAMPAIGNS = {"default": (PROFILES["default"], None, (100, 100, 0, 0)),
             "crashy": (PROFILES["crashy"], None, (100, 100, 0, 0)),
             "lossy": (PROFILES["lossy"], None, (8, 8, 5, 0)),
             "laggard": (PROFILES["default"], LAGGARD, (100, 100, 0, 20))}


@pytest.mark.parametrize("campaign", list(CAMPAIGNS))
def test_mirrors_open_and_close_only_what_the_metadata_group_committed_and_converge(campaign):
    faults, cluster, (opens, closes, stale_holds, stale_closed) = CAMPAIGNS[campaign]
    stats = _campaign(range(6), faults, cluster)
    print(campaign, stats)
    assert stats.opens >= opens and stats.closes >= closes, stats
    assert stats.stale_holds >= stale_holds and stats.stale_closed >= stale_closed, stats
    assert stats.broker_crashes >= 10 and stats.stale_views >= 20, stats


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), drop=st.floats(0.0, 0.4),
       broker_crash=st.floats(0.0, 0.02), pause=st.floats(0.0, 0.02),
       link_cut=st.floats(0.0, 0.05), data_transfer=st.floats(0.0, 0.04))
def test_mirror_property(seed, drop, broker_crash, pause, link_cut, data_transfer):
    faults = dataclasses.replace(PROFILES["default"], drop=drop, leader_pause=pause)
    cluster = ClusterFaults(broker_crash=broker_crash, link_cut=link_cut,
                            data_transfer=data_transfer)
    simulation = GroupsSimulation(seed, faults, cluster=cluster)
    for _ in range(ROUNDS // 2):
        simulation.round()
    simulation.settle_and_converge()


def test_a_mirror_that_ignores_the_groups_watermark_is_caught():
    """The re-open check is not vacuous: a mirror that acts on whatever copy of the metadata
    group its broker has, however far behind the group's own decisions, is caught re-opening
    an incarnation the group closed."""
    import tests.unit.broker.replication.test_topic_mirror_property as this

    original = this.decide

    def forgetful(metadata, mine, holds_any):
        return original(metadata, dataclasses.replace(mine, metadata_end_seen=0), holds_any)

    this.decide = forgetful
    try:
        with pytest.raises(MirrorViolation, match="re-opens an incarnation the group closed"):
            for seed in range(20):
                simulation = GroupsSimulation(seed, PROFILES["default"], cluster=LAGGARD)
                for _ in range(ROUNDS):
                    simulation.round()
    finally:
        this.decide = original


def test_a_mirror_that_closes_on_absence_alone_is_caught():
    """The check is not vacuous: a mirror that closes whatever its (stale) copy of the
    metadata group lacks is caught closing an incarnation nobody deleted."""
    import tests.unit.broker.replication.test_topic_mirror_property as this

    original = this.decide

    def careless(metadata, mine, holds_any):
        actions = [CloseTopic(name, live.topic_id, metadata.end)
                   for name, live in sorted(mine.topics.items())
                   if metadata.topics.get(name) != live]
        return actions or original(metadata, mine, holds_any)

    this.decide = careless
    try:
        with pytest.raises(MirrorViolation, match="has not deleted"):
            for seed in range(20):
                simulation = GroupsSimulation(seed, PROFILES["lossy"],
                                              cluster=ClusterFaults(broker_crash=0.01))
                for _ in range(ROUNDS):
                    simulation.round()
    finally:
        this.decide = original

"""The client's leader table: METADATA fenced by leader epoch, silent brokers shunned."""

from common.address import parse_host_port
from common.kaska.leaders import LeaderTable
from common.kaska.protocol.metadata import (
    NO_LEADER,
    BrokerInfo,
    MetadataResponse,
    PartitionInfo,
)

BROKERS = (BrokerInfo(1, "h1", 1), BrokerInfo(2, "h2", 2), BrokerInfo(3, "h3", 3))
ROUTE = ("t", 0)


def answer(leader_id: int, epoch: int, brokers=BROKERS) -> MetadataResponse:
    return MetadataResponse(brokers, {"t": (PartitionInfo(0, leader_id, epoch),)})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stale_answer_never_replaces_a_newer_leader():
    table = LeaderTable()
    table.absorb("t", answer(2, 5))
    table.absorb("t", answer(1, 4))  # a broker that has not heard of epoch 5
    assert table.leader(ROUTE) == ("h2", 2) and table.epoch(ROUTE) == 5
    table.absorb("t", answer(3, 6))
    assert table.leader(ROUTE) == ("h3", 3) and table.epoch(ROUTE) == 6


def test_with_no_leader_known_any_answer_is_taken_even_an_older_epoch():
    # A cluster rebuilt from empty data directories starts over at low epochs.
    table = LeaderTable()
    table.absorb("t", answer(2, 9))
    table.forget(ROUTE)
    table.absorb("t", answer(1, 1))
    assert table.leader(ROUTE) == ("h1", 1) and table.epoch(ROUTE) == 1


def test_no_leader_at_a_newer_epoch_forgets_the_old_one():
    table = LeaderTable()
    table.absorb("t", answer(2, 5))
    table.absorb("t", answer(NO_LEADER, 6))
    assert table.leader(ROUTE) is None


def test_a_silent_broker_is_not_followed_on_a_hint_nor_on_its_old_epoch():
    clock = Clock()
    table = LeaderTable(silence_s=10.0, clock=clock)
    table.absorb("t", answer(2, 5))
    table.absorb("t", answer(3, 6))  # the probe heard of the successor
    table.mark_silent(("h2", 2))
    table.follow_hint(ROUTE, "h2:2", parse_host_port)  # a follower that has not noticed yet
    assert table.leader(ROUTE) is None
    table.absorb("t", answer(2, 5))  # the thawed ex-leader's own view
    assert table.leader(ROUTE) is None
    table.absorb("t", answer(2, 7))  # elected again, later
    assert table.leader(ROUTE) == ("h2", 2)
    table.follow_hint(ROUTE, "h2:2", parse_host_port)
    assert table.leader(ROUTE) == ("h2", 2)


def test_silence_ends_after_its_bound():
    clock = Clock()
    table = LeaderTable(silence_s=10.0, clock=clock)
    table.absorb("t", answer(2, 5))
    table.mark_silent(("h2", 2))
    assert table.leader(ROUTE) is None
    table.follow_hint(ROUTE, "h2:2", parse_host_port)
    assert table.leader(ROUTE) is None
    clock.now = 10.0
    table.follow_hint(ROUTE, "h2:2", parse_host_port)
    assert table.leader(ROUTE) == ("h2", 2)


def test_brokers_listed_in_answers_are_remembered():
    table = LeaderTable()
    table.absorb("t", answer(1, 1, brokers=BROKERS[:1]))
    table.absorb("t", answer(1, 1, brokers=BROKERS[1:]))
    assert table.brokers() == {("h1", 1), ("h2", 2), ("h3", 3)}


def test_the_cluster_leader_is_the_controller_named_not_a_partition_leader():
    table = LeaderTable()
    response = MetadataResponse(BROKERS, {
        "a": (PartitionInfo(0, 1, 3), PartitionInfo(1, NO_LEADER, 4)),
        "b": (PartitionInfo(0, 2, 9),)}, controller_id=1, controller_epoch=3)
    assert table.absorb_cluster_leader(response) == (("h1", 1), 3)
    assert table.absorb_cluster_leader(MetadataResponse(BROKERS, {})) is None


def test_a_silent_broker_is_fenced_per_partition_not_by_another_groups_epoch():
    """Partitions of different replication groups have epochs of their own: a broker that went
    silent while leading a group at epoch 9 is followed again for a partition of another group
    as soon as that partition names it at an epoch newer than its own (2 > 1)."""
    table = LeaderTable()
    table.absorb("a", MetadataResponse(BROKERS, {
        "a": (PartitionInfo(0, 2, 9), PartitionInfo(1, 1, 1))}))
    table.mark_silent(("h2", 2))
    assert table.leader(("a", 0)) is None
    table.absorb("a", MetadataResponse(BROKERS, {
        "a": (PartitionInfo(0, 2, 9), PartitionInfo(1, 1, 1))}))
    assert table.leader(("a", 0)) is None, "its own partition's old epoch: still shunned"
    table.absorb("a", MetadataResponse(BROKERS, {
        "a": (PartitionInfo(0, 2, 9), PartitionInfo(1, 2, 2))}))
    assert table.leader(("a", 1)) == ("h2", 2)

"""A delete is answered once every data group holding a partition of the topic has committed
its close on the answering broker (cluster/topic_admin.py, TopicAdmin.delete_topic): from the answer
on, no produce into the deleted incarnation is acknowledged. On the real objects of
test_topic_mirror_nodes.py (two brokers, a metadata group and one data group each; broker 3
only fetches), the network and the mirror's rounds played by hand."""

from __future__ import annotations

import threading

import pytest

from common.kaska.errors import KaskaError, UnknownTopicOrPartitionError
from services.broker.cluster.replication_groups import ReplicationGroup, ReplicationGroups
from services.broker.cluster.topic_admin import TopicAdmin
from tests.unit.broker.replication.test_replication_safety import (
    WAIT_S,
    confirm_lease,
    fetch_everything,
)
from tests.unit.broker.replication.test_topic_mirror_nodes import (
    DATA_GROUP,
    elect,
)
from tests.unit.broker.replication.test_topic_mirror_nodes import (
    brokers as brokers,  # noqa: F401 (fixture)
)
from tests.unit.broker.storage.batches import batch, new_producer_id


def topic_admin(broker) -> TopicAdmin:
    groups = [ReplicationGroup(number, log, node, topics, manager)
              for number, (log, node, topics, manager) in enumerate(zip(
                  broker.logs, broker.nodes, broker.topics, broker.managers, strict=True))]
    return TopicAdmin(ReplicationGroups(groups), ack_timeout_s=WAIT_S)


def commit_both(broker) -> None:
    for node in broker.nodes:
        fetch_everything(node, follower=3)
        fetch_everything(node, follower=3)


def test_a_delete_is_answered_only_once_the_data_group_has_committed_its_close(brokers):
    clock, one, _two = brokers
    elect(one.metadata, clock, voter=2)
    elect(one.data, clock, voter=2)
    topics = topic_admin(one)
    one.managers[0].journal_create("t", 1)
    commit_both(one)
    assert [type(action).__name__ for action in one.mirror.round_once()] == ["OpenTopic"]
    commit_both(one)

    answered = threading.Event()
    failed: list[BaseException] = []

    def delete() -> None:
        try:
            topics.delete_topic("t", lambda _name: None)
        except KaskaError as error:  # the test reads it
            failed.append(error)
        answered.set()

    deleting = threading.Thread(target=delete, daemon=True)
    deleting.start()
    # The metadata delete commits (broker 3 fetches); the data group has not closed t yet.
    while one.metadata.journal.entries(one.metadata.journal.end - 1)[0].topic != "t" or \
            one.metadata.state.commit < one.metadata.journal.end:
        fetch_everything(one.metadata, follower=3)
    assert not answered.wait(0.2), "answered before the data group closed the topic"
    assert "t" in one.logs[DATA_GROUP].topics(), "the scenario: the group still holds it"
    closed = one.mirror.round_once()
    assert [type(action).__name__ for action in closed] == ["CloseTopic"]
    assert not answered.wait(0.2), "answered before the close was committed"
    commit_both(one)
    assert answered.wait(WAIT_S) and not failed, failed
    assert "t" not in one.logs[DATA_GROUP].topics()
    confirm_lease(one.data, follower=3)
    with pytest.raises(UnknownTopicOrPartitionError):
        one.managers[1].partition("t", 0).append(batch(b"late", producer_id=new_producer_id(),
                                                       sequence=0))

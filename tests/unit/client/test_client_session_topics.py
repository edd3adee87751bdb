"""SessionControl's topic creation over a scripted Admin: "already exists" is checked against
the topic list, and a topic missing from it (deleted in between) is created again rather than
reported with a wrong shape."""

from __future__ import annotations

import threading

import pytest

from client.session import SessionControl, TopicLayoutError
from common.kaska.errors import TopicAlreadyExistsError


class ScriptedAdmin:
    """Every create answers "already exists" until `exists_until` creates were made; the topic
    list is `listed` (one dict per call, the last one repeated)."""

    def __init__(self, exists_until: int, listed: list[dict[str, int]]) -> None:
        self.creates = 0
        self.exists_until = exists_until
        self.listed = listed
        self.lists = 0

    def create_topic(self, name: str, partitions: int) -> None:
        self.creates += 1
        if self.creates <= self.exists_until:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")

    def topics(self) -> dict[str, int]:
        self.lists += 1
        return self.listed[min(self.lists, len(self.listed)) - 1]


def _control(admin: ScriptedAdmin) -> SessionControl:
    return SessionControl(admin, producer=None, consumer=None, client_id="c1", partitions=4,
                          stop=threading.Event(), stall_timeout_s=5.0)


def test_a_topic_deleted_between_already_exists_and_the_list_is_created_again():
    """The list is the metadata leader's committed one, so a topic missing from it right
    after "already exists" was deleted meanwhile: create it again. Before, this was a
    TopicLayoutError ("None partitions"), which stopped the session."""
    admin = ScriptedAdmin(exists_until=1, listed=[{}])
    _control(admin)._persist(lambda: _control(admin)._ensure_topic("flights.c1", 4), "create")
    assert (admin.creates, admin.lists) == (2, 1)


def test_a_topic_of_another_shape_is_still_refused():
    admin = ScriptedAdmin(exists_until=1, listed=[{"flights.c1": 2}])
    with pytest.raises(TopicLayoutError, match="2 partitions"):
        _control(admin)._ensure_topic("flights.c1", 4)

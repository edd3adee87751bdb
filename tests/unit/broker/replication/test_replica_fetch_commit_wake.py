"""A caught-up follower learns a commit index at once, not a long-poll later, on the real
ReplicationNode: its fetch is not held while the leader has a commit index it has not sent it
(the fetch itself may have advanced it), a held fetch is woken by a commit advance, and a fetch
with nothing new -- no entries, no commit -- is held (an idle cluster does not spin)."""

from __future__ import annotations

import threading
import time

from services.broker.replication.fetch_answers import FetchSession
from services.broker.replication.wire.replica_fetch import FetchOutcome, ReplicaFetchRequest
from tests.unit.broker.replication.test_replication_safety import (
    Clock,
    leader_with_topic,
    produce_deferred,
)
from tests.unit.broker.replication.test_replication_safety import log as log  # noqa: F401
from tests.unit.broker.storage.batches import batch

LONG_POLL_MS = 60_000  # a held fetch would outlast the test's patience many times over
ANSWER_WITHIN_S = 10.0
HELD_MS = 300


def fetch(node, session: FetchSession, fetch_end: int, max_wait_ms: int):
    return node.answer_fetch(ReplicaFetchRequest(2, node.state.epoch, fetch_end,
                                                 node.journal.last_epoch, 1 << 20,
                                                 max_wait_ms), session=session)


def in_thread(call):
    """Run `call` on a thread; (thread, box) where box holds its result once done."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    return thread, box


def test_the_fetch_that_advances_the_commit_is_answered_at_once(log):
    node, manager = leader_with_topic(log, Clock())
    try:
        session = FetchSession()
        fetch(node, session, node.journal.end, 0)  # the follower holds everything so far
        end = node.journal.end
        produce_deferred(manager, log, "t", batch(b"one"))
        response, entries = fetch(node, session, end, 0)
        assert [entry.index for entry in entries] == [end] and response.commit == end
        # The follower now holds entry `end`: this fetch commits it; nothing else is new.
        thread, box = in_thread(lambda: fetch(node, session, end + 1, LONG_POLL_MS))
        thread.join(ANSWER_WITHIN_S)
        assert box, "the fetch that advanced the commit was held as a long-poll"
        response, entries = box[0]
        assert response.outcome is FetchOutcome.ENTRIES and not entries
        assert response.commit == end + 1 == node.state.commit
    finally:
        node.stop()


def test_an_idle_caught_up_follower_is_held(log):
    node, _ = leader_with_topic(log, Clock())
    try:
        session = FetchSession()
        fetch(node, session, node.journal.end, 0)
        started = time.monotonic()
        response, entries = fetch(node, session, node.journal.end, HELD_MS)
        assert time.monotonic() - started >= HELD_MS / 1000 * 0.9, "answered at once: a spin"
        assert not entries and response.commit == node.state.commit
    finally:
        node.stop()

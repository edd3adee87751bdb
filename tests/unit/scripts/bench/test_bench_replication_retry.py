"""The replication benchmark's producer treats a refusal as a client does: it backs off, asks for
the leader again and resends from the first batch not acknowledged, counting the refusal; an
error that is not retriable ends the round. Fake connections stand in for the brokers."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from common.kaska.errors import CorruptBatchError, NotLeaderError
from common.kaska.protocol.frames import ErrorBody
from common.kaska.protocol.produce import ACKS_ALL, ProduceResponse
from common.kaska.retry import RetryPolicy
from scripts.bench.replication import produce_retrying

NO_PAUSE = RetryPolicy(retries_max=3, backoff_s_initial=0.0, backoff_s_max=0.0)


class FakeConnection:
    """Answers every produce with success, except the batch numbers in `refuse` (code)."""

    def __init__(self, sent: list[bytes], refuse: dict[bytes, int] | None = None) -> None:
        self.sent = sent
        self.refuse = refuse or {}
        self.closed = False

    def send(self, _api, parts) -> Future:
        batch = parts[-1]
        self.sent.append(batch)
        answer: Future = Future()
        code = self.refuse.get(batch, 0)
        body = ErrorBody("refused").encode() if code else ProduceResponse(0, 1, False).encode()
        answer.set_result((code, body))
        return answer

    def close(self) -> None:
        self.closed = True


def batches(count: int) -> list[bytes]:
    return [f"batch-{n}".encode() for n in range(count)]


def test_a_not_leader_answer_is_retried_from_the_first_unacknowledged_batch():
    sent: list[bytes] = []
    connections = [FakeConnection(sent, {b"batch-3": NotLeaderError.code}),
                   FakeConnection(sent)]
    handed = iter(connections)
    refusals = produce_retrying(lambda: next(handed), "t", 0, batches(6), 2, ACKS_ALL,
                                retry=NO_PAUSE)
    assert refusals == 1
    assert sent[:5] == batches(5), "the first connection got batches 0..4 (two in flight)"
    assert sent[5:] == batches(6)[3:], "resent from batch 3, the first not acknowledged"
    assert all(connection.closed for connection in connections)


def test_refusals_past_the_retry_budget_end_the_round():
    sent: list[bytes] = []
    with pytest.raises(NotLeaderError):
        produce_retrying(lambda: FakeConnection(sent, {b"batch-0": NotLeaderError.code}),
                         "t", 0, batches(2), 1, ACKS_ALL, retry=NO_PAUSE)
    assert sent.count(b"batch-0") == NO_PAUSE.retries_max + 1


def test_an_error_that_is_not_retriable_is_raised_at_once():
    sent: list[bytes] = []
    with pytest.raises(CorruptBatchError):
        produce_retrying(lambda: FakeConnection(sent, {b"batch-1": CorruptBatchError.code}),
                         "t", 0, batches(3), 1, ACKS_ALL, retry=NO_PAUSE)
    assert sent == batches(2)

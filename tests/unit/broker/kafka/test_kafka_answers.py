"""A Kafka connection's answers leave in request order, a deferred one holding back those
behind it but not the reading of further requests (services/broker/kafka/answers.py)."""

import threading

from services.broker.kafka.answers import Deferred, OrderedAnswers

WAIT_S = 10.0


def test_answers_leave_in_order_behind_a_deferred_one():
    sent: list[bytes] = []
    release = threading.Event()

    def acked() -> bytes:
        assert release.wait(WAIT_S)
        return b"produce"

    answers = OrderedAnswers(sent.append, pending_max=4, peer="test")
    answers.put(Deferred(acked))
    answers.put(b"metadata")  # queued at once: the reader is not held by the ack wait
    assert sent == []  # the metadata answer waits for the produce ahead of it
    release.set()
    assert answers.close(WAIT_S)
    assert sent == [b"produce", b"metadata"]


def test_a_deferred_none_sends_nothing():
    sent: list[bytes] = []
    answers = OrderedAnswers(sent.append, pending_max=2, peer="test")
    answers.put(Deferred(lambda: None))
    answers.put(b"next")
    assert answers.close(WAIT_S)
    assert sent == [b"next"]


def test_a_failed_send_breaks_the_connection_and_drops_the_rest(caplog):
    sent: list[bytes] = []

    def send(frame: bytes) -> None:
        if frame == b"second":
            raise ConnectionResetError("client left")
        sent.append(frame)

    answers = OrderedAnswers(send, pending_max=8, peer="test")
    for frame in (b"first", b"second", b"third", b"fourth"):
        answers.put(frame)
    assert answers.close(WAIT_S)
    assert sent == [b"first"] and answers.broken
    assert "3 answers not delivered" in caplog.text  # the failed one and the two after it


def test_a_full_queue_holds_the_reader_back():
    release = threading.Event()
    answers = OrderedAnswers(lambda frame: None, pending_max=1, peer="test")
    answers.put(Deferred(lambda: b"x" if release.wait(WAIT_S) else None))  # taken by the thread
    answers.put(b"queued")  # fills the one slot
    third = threading.Thread(target=answers.put, args=(b"third",))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # back-pressure: the reader waits
    release.set()
    third.join(WAIT_S)
    assert not third.is_alive() and answers.close(WAIT_S)

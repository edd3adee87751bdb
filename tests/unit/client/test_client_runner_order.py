"""The client's session order with fake broker calls: topics, the airports file, SessionStarted
with the airports' end offsets, then the flights file, then SessionEnded -- on a fresh run and
on runs resumed after a kill at each step: the airports resumed from their acked prefix,
SessionStarted written again only while the checkpoint does not say it was acknowledged, and
never a flights batch before it."""

import threading
import uuid

import pytest

from client.progress import LogUploadProgress
from client.runner import ClientConfig, ClientSession
from common.flights.session_records import airports_topic, flights_topic

PARTITIONS = 2


class Killed(BaseException):
    """The process dies here (nothing in the client catches a BaseException)."""


class World:
    """What the fake broker holds and the order of every call."""

    def __init__(self, client_id, kill_at=None):
        """`kill_at`: the index of the call at which the process dies (None: never)."""
        self.client_id = client_id
        self.kill_at = kill_at
        self.events = []
        self.stored = {}  # (topic, partition, sequence) -> offset
        self.ends = {}  # (topic, partition) -> end offset
        self.started = []  # every SessionStarted write: its airports end offsets

    def record(self, event):
        self.events.append(event)
        if self.kill_at is not None and len(self.events) == self.kill_at + 1:
            raise Killed(event)

    def topic_kind(self, topic):
        return {airports_topic(self.client_id): "airports",
                flights_topic(self.client_id): "flights"}[topic]


class FakeProducers:
    def __init__(self, world):
        self.world = world
        self.lock = threading.Lock()

    def send_batch(self, topic, partition, payloads, sequence=None):
        with self.lock:
            key = (topic, partition, sequence)
            if key not in self.world.stored:
                end = self.world.ends.get((topic, partition), 0)
                self.world.stored[key] = end
                self.world.ends[(topic, partition)] = end + 1
            self.world.record(f"send {self.world.topic_kind(topic)}")
            return self.world.stored[key]

    def close(self):
        """Nothing to release."""


class FakeControl:
    def __init__(self, world):
        self.world = world

    def create_topics(self):
        self.world.record("create topics")

    def topic_end_offsets(self, topic):
        return [self.world.ends.get((topic, p), 0) for p in range(PARTITIONS)]

    def end_offsets(self):
        return {topic: self.topic_end_offsets(topic)
                for topic in (airports_topic(self.world.client_id),
                              flights_topic(self.world.client_id))}

    def write_started(self, airports_end_offsets):
        self.world.started.append(list(airports_end_offsets))
        self.world.record("started")

    def write_ended(self, ended):
        self.world.record("ended")

    def log_start(self, topic, partition):
        return 0


def files(tmp_path):
    flights = tmp_path / "flights.csv"
    flights.write_text("n,sq\n" + "".join(f"{i},{i * i}\n" for i in range(40)))
    airports = tmp_path / "airports.csv"
    airports.write_text("code,name\n" + "".join(f"A{i:02d},x\n" for i in range(13)))
    return flights, airports


def run_upload(tmp_path, world):
    """One run up to SessionEnded (the results phase is not this test's)."""
    flights, airports = files(tmp_path)
    config = ClientConfig(flights=flights, airports=airports, brokers="127.0.0.1:1",
                          results_dir=tmp_path / "results", client_id=world.client_id,
                          batch_rows=4, partitions=PARTITIONS, checkpoint_interval_s=0.0,
                          upload_window_bytes=1 << 30)
    session = ClientSession(config, threading.Event(), LogUploadProgress(emit=lambda _: None))
    session.control = FakeControl(world)
    session.data_producers = FakeProducers(world)
    session.window = session._make_window()
    session._open()
    if session.state.session_ended is None:
        session._upload()
        session._end()
    return session


def check_order(world, events):
    """SessionStarted once the airports are complete, before any flights batch (`events`: of
    every run, in order)."""
    started_at = events.index("started")
    assert all(e != "send flights" for e in events[:started_at])
    airports = airports_topic(world.client_id)
    complete = [world.ends.get((airports, p), 0) for p in range(PARTITIONS)]
    assert world.started and all(ends == complete for ends in world.started)


def test_a_fresh_session_starts_after_the_airports_and_before_the_flights(tmp_path):
    world = World(str(uuid.uuid4()))
    run_upload(tmp_path, world)
    check_order(world, world.events)
    assert world.events[0] == "create topics" and world.events[-1] == "ended"
    assert world.started == [[2, 2]]  # 13 airports rows, 4 a message: 4 messages on 2 parts
    first_flight = world.events.index("send flights")
    assert world.events[first_flight - 1] == "started"
    assert world.events.count("send airports") == 4 and world.events.count("send flights") == 10


@pytest.mark.parametrize("kill_at", [1, 2, 4, 5, 6, 10])
def test_a_session_killed_anywhere_resumes_in_order(tmp_path, kill_at):
    """Killed at the n-th call of a fresh run (0 = create topics, 1-4 the airports messages,
    5 SessionStarted, 6... the flights), the call stored by the broker but not answered: the
    resumed run writes SessionStarted with the complete airports before any flights batch,
    stores every message once, and writes SessionStarted again only when the checkpoint did
    not say it was acknowledged."""
    world = World(str(uuid.uuid4()), kill_at=kill_at)
    with pytest.raises(Killed):
        run_upload(tmp_path, world)
    first_run = list(world.events)
    assert len(first_run) >= kill_at + 1  # the other sender may finish its message
    world.kill_at = None
    world.events.clear()
    run_upload(tmp_path, world)  # resumed: same client id, same state directory
    check_order(world, first_run + world.events)
    assert world.events[-1] == "ended"
    kinds = [world.topic_kind(topic) for topic, _, _ in world.stored]
    assert kinds.count("airports") == 4 and kinds.count("flights") == 10
    if kill_at > 5:  # SessionStarted acknowledged and checkpointed: never again
        assert world.started == [[2, 2]]
        assert "send airports" not in world.events and "started" not in world.events
    else:  # not acknowledged yet: written (again) by the resumed run, same content
        assert world.events.count("started") == 1 and world.started[-1] == [2, 2]

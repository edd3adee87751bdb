"""A broker whose disk is full answers KAFKA_STORAGE_ERROR (56, retriable): the client library
retries it like a failover, and the uploader's patience waits it out."""

import threading

from common.kaska import cluster as cluster_module
from common.kaska.cluster import Cluster
from common.kaska.errors import KaskaStorageError, error_for_code
from common.kaska.patience import persist
from common.kaska.retry import RetryPolicy


class InstantStop(threading.Event):
    """An event whose wait returns at once (without being set): no real sleeping in tests."""

    def wait(self, timeout=None):
        return self.is_set()


class FullThenFreed:
    """Refuses the first `refusals` calls with the broker's storage error (as decoded from
    the wire), then answers."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    def __call__(self, *_args, **_kwargs):
        self.calls += 1
        if self.calls <= self.refusals:
            raise error_for_code(56)("storage full on /data")
        return "stored"


def test_the_wire_code_is_the_retriable_storage_error():
    assert error_for_code(56) is KaskaStorageError and KaskaStorageError.retriable


def test_the_cluster_retries_a_storage_error(monkeypatch):
    answer = FullThenFreed(refusals=2)

    class Connection:
        alive = True

        def __init__(self, address, **_options):
            self.address = address

        def request(self, request, timeout_s=None, watch=None):
            return answer()

        def close(self, reason=""):
            self.alive = False

    monkeypatch.setattr(cluster_module, "BrokerConnection", Connection)
    monkeypatch.setattr(cluster_module.time, "sleep", lambda _s: None)
    cluster = Cluster("h1:1", retry=RetryPolicy(3, 0.001, 0.002))
    assert cluster.call("produce") == "stored" and answer.calls == 3


def test_patience_waits_out_a_full_broker():
    call = FullThenFreed(refusals=5)
    assert persist(call, "upload", InstantStop()) == "stored" and call.calls == 6

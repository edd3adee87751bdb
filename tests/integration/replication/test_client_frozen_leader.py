"""A frozen leader costs the clients an election, not their request timeout.

Three real brokers; the leader is SIGSTOPped (the kernel keeps accepting its connections, so
nothing but an answer that never comes tells the client). The clients run with a request
timeout of REQUEST_TIMEOUT_S: a client that waited it out would take at least that long, so
every step here must end well before it (WAITED_OUT_BOUND_S), and the client's own log must
show the request it had sent to the frozen broker abandoned because another broker named a
newer leader (LeaderMovedError), which proves the scenario happened. The stall figures
themselves (median, max over 20 trials) are `scripts/bench_replication.py`'s, not a test's.

- A producer and a consumer that were using the leader when it froze.
- A producer created while it is frozen, with the frozen broker first in its bootstrap list
  (its first METADATA goes there).
Then the leader thaws, and every acknowledged record is read back exactly once.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from common.kaska import Consumer, Producer
from tests.integration.replication.workload import read_back

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "frozen"
REQUEST_TIMEOUT_S = 120.0
# Far below the request timeout, far above an election on a loaded machine (1-2 s timeout,
# a pre-vote and a vote): only a client that waited out the timeout can exceed it.
WAITED_OUT_BOUND_S = REQUEST_TIMEOUT_S / 2
CLIENT = {"request_timeout_s": REQUEST_TIMEOUT_S, "connect_timeout_s": 5.0}


def moved_retries(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if "LeaderMovedError" in record.getMessage()]


def timed(what: str, call):
    started = time.monotonic()
    result = call()
    took_s = time.monotonic() - started
    assert took_s < WAITED_OUT_BOUND_S, \
        f"{what} took {took_s:.1f} s: it waited out the {REQUEST_TIMEOUT_S:g} s request timeout"
    return result, took_s


@pytest.mark.timeout(300)
def test_clients_of_a_frozen_leader_move_to_its_successor_and_nothing_is_lost(
        make_cluster, caplog):
    caplog.set_level(logging.INFO, logger="common.kaska.cluster")
    cluster = make_cluster()
    cluster.create_topic(TOPIC, 1)
    old = cluster.leader()
    frozen_first = ",".join([cluster.address(old.leader_id)]
                            + [cluster.address(i) for i in cluster.others(old.leader_id)])
    acked: list[bytes] = []
    with Producer(frozen_first, **CLIENT) as producer, \
            Consumer(frozen_first, "frozen-readers", **CLIENT) as consumer:
        consumer.subscribe(TOPIC)
        producer.send_msg(TOPIC, b"before")
        acked.append(b"before")
        assert consumer.poll(timeout_s=30.0).value == b"before"

        cluster.pause(old.leader_id)
        try:
            # The consumer's next fetch waits at the frozen leader while the producer's
            # request does too; the consumer gets its record from the successor.
            polled: list = []
            reader = threading.Thread(target=lambda: polled.append(
                consumer.poll(timeout_s=WAITED_OUT_BOUND_S)), daemon=True)
            reader.start()
            _, produce_s = timed("a produce at the frozen leader",
                                 lambda: producer.send_msg(TOPIC, b"during"))
            acked.append(b"during")
            reader.join(WAITED_OUT_BOUND_S)
            assert not reader.is_alive() and polled and polled[0] is not None, \
                f"the consumer read nothing from the successor: {polled}"
            assert polled[0].value == b"during"
            new = cluster.leader(among=cluster.others(old.leader_id), min_epoch=old.epoch + 1)
            retries = moved_retries(caplog)
            assert retries, "no request was abandoned at the frozen leader: the scenario " \
                            "(a request waiting there while leadership moved) did not happen"

            # A client born while the leader is frozen, the frozen broker first in its list.
            with Producer(frozen_first, **CLIENT) as late:
                _, late_s = timed("a new producer's first produce",
                                  lambda: late.send_msg(TOPIC, b"late"))
            acked.append(b"late")
        finally:
            cluster.resume(old.leader_id)
    cluster.leader(min_epoch=new.epoch)
    stored, _ = read_back(cluster.bootstrap, TOPIC, [0])
    values = [value for _, value in stored[0]]
    assert sorted(values) == sorted(acked), f"stored {values}, acknowledged {acked}"
    print(f"\n[frozen leader] broker {old.leader_id} (epoch {old.epoch}) paused; successor "
          f"{new.leader_id} (epoch {new.epoch}); produce at the frozen leader {produce_s:.2f} s, "
          f"a new producer's first produce {late_s:.2f} s; abandoned requests: {retries}")

"""The Kafka listener end to end: the broker's CPU per MB for the same records produced and
consumed through Kafka's protocol (confluent-kafka: librdkafka, a fast native client) and
through Kaska's own (the Python client), against one broker child process or a cluster of
them (`brokers`, BenchCluster of replication.py; every broker's CPU is measured and summed:
each topic lands in one of several replication groups, whose leader need not be the cluster
leader, so measuring the cluster leader alone would miss the work).

Each of `repeats` rounds, interleaved: (a) Kafka produce -- N records of B bytes, idempotent,
acks=all, into a fresh topic, one `produce()` call per record; (b) Kafka consume -- those N
from offset 0, by confluent-kafka in this process, then by kcat (librdkafka in C, a process of
its own: no Python object per record); (c) Kafka produce of the same records through
`produce_batch` (10,000 a call) into a third topic; (d) Kaska produce of the same values into
another fresh topic; (e) Kaska consume; then, for each codec of `codecs` (lz4, zstd: Kafka
batches the broker inflates to check and stores compressed), (f) Kafka produce through
`produce_batch` with that `compression.type`, (g) Kafka consume and (h) Kaska consume of those
records (steps named `..._lz4`, `..._zstd`). Reported per step: records per second (wall; dominated
by the client and by whatever else runs on the machine), the brokers' CPU milliseconds per MB
of record values (`server_cpu`, all brokers together, measured from /proc: the listener's and
replication's real cost, transcoding included, and hardly moved by machine noise) and the
client's (`client_cpu`: this process, librdkafka's threads included, plus kcat's process).
Medians.

Invariants: every round reads back exactly N records in each protocol, and the produce_batch
topic holds exactly N (its high watermark; RuntimeError otherwise).
Threads: none of its own (librdkafka runs its own).
"""

from __future__ import annotations

import gc
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from common.kaska import Admin
from common.kaska import Consumer as KaskaConsumer
from common.kaska import Producer as KaskaProducer
from scripts.bench.child import measured
from scripts.bench.replication import BenchCluster, create_topic

MB = 1_000_000
CLIENT_TIMEOUT_S = 300.0
PRODUCE_BATCH_RECORDS = 10_000  # librdkafka's batch.num.messages default
# Both Kafka producers: idempotent, acks=all (the target), batches sent after 5 ms.
PRODUCER_SETTINGS = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}
# Both Kafka consumers (confluent-kafka and kcat): up to 8 MB per partition and 50 MB per fetch,
# and a prefetch queue of up to 1M records. With librdkafka's defaults (1 MB per partition,
# fetching paused while 100k records wait), confluent-kafka's consumer idled between fetches:
# 1M records of 100 B from one broker, one probe, 2026-11-27: 714k records/s with the larger
# fetches alone, 2.73M with the queue too (0.5 CPU-s in both: it waited, it did not work).
CONSUMER_FETCH_SETTINGS = {"fetch.max.bytes": 52_428_800, "fetch.message.max.bytes": 8_388_608,
                           "queued.min.messages": 1_000_000}


def kafka_produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
    for value in values:
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:  # the client's queue is full: let it drain
                producer.poll(0.01)
    if producer.flush(CLIENT_TIMEOUT_S):
        raise RuntimeError("Kafka produce did not finish")


def kafka_produce_batches(bootstrap: str, topic: str, values: list[bytes], **conf) -> None:
    """The same records through `produce_batch` (PRODUCE_BATCH_RECORDS per call): one Python
    call per batch instead of per record, so the client's own loop costs less than the
    broker's work (per-record `produce()` costs the client ~1 us a record in Python alone)."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, **conf})
    for start in range(0, len(values), PRODUCE_BATCH_RECORDS):
        pending = [{"value": value} for value in values[start:start + PRODUCE_BATCH_RECORDS]]
        while pending:
            producer.produce_batch(topic, pending, partition=0)
            # Refused ones (the client's queue is full) carry "_error": let it drain, resend.
            pending = [{"value": message["value"]} for message in pending
                       if "_error" in message]
            if pending:
                producer.poll(0.05)
    if producer.flush(CLIENT_TIMEOUT_S):
        raise RuntimeError("Kafka produce did not finish")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), CLIENT_TIMEOUT_S)
    consumer.close()
    if high != len(values):
        raise RuntimeError(f"Kafka produce_batch: {high} records stored, not {len(values)}")


def kafka_consume(bootstrap: str, topic: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, **CONSUMER_FETCH_SETTINGS})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        got += sum(1 for message in consumer.consume(10_000, 1.0) if message.error() is None)
    consumer.close()
    if got != count:
        raise RuntimeError(f"Kafka consume read {got} of {count}")


def kcat_consume(bootstrap: str, topic: str, count: int) -> None:
    """The same records read by kcat (librdkafka in C, its own process): one byte printed per
    record, so the figure is the consumer's and the broker's, not a Python loop's."""
    if shutil.which("kcat") is None:
        raise RuntimeError("kcat consume: kcat is not installed (apt-get install kcat)")
    done = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
         "-c", str(count), "-e", "-q", "-f", ".",
         *[arg for key, value in CONSUMER_FETCH_SETTINGS.items()
           for arg in ("-X", f"{key}={value}")]],
        capture_output=True, timeout=CLIENT_TIMEOUT_S, check=False)
    if done.returncode != 0 or len(done.stdout) != count:
        raise RuntimeError(f"kcat consume read {len(done.stdout)} of {count} (exit "
                           f"{done.returncode}): {done.stderr.decode(errors='replace')[-500:]}")


def kaska_produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KaskaProducer(bootstrap)
    futures = [producer.send(topic, value) for value in values]
    producer.flush()
    futures[-1].result(CLIENT_TIMEOUT_S)
    producer.close()


def kaska_consume(bootstrap: str, topic: str, count: int) -> None:
    consumer = KaskaConsumer(bootstrap)
    consumer.seek(topic, 0)
    got = 0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        got += consumer.poll(1.0) is not None
    consumer.close()
    if got != count:
        raise RuntimeError(f"Kaska consume read {got} of {count}")


def compressed_steps(kafka: str, kaska: str, topic: str, codec: str, values: list[bytes]) -> dict:
    """The steps of one compressed round: produce (`produce_batch`), then both consumers."""
    count = len(values)
    return {
        f"kafka_produce_batch_{codec}": lambda: kafka_produce_batches(
            kafka, topic, values, **{"compression.type": codec}),
        f"kafka_consume_{codec}": lambda: kafka_consume(kafka, topic, count),
        f"kaska_consume_{codec}": lambda: kaska_consume(kaska, topic, count),
    }


def _client_cpu_s() -> float:
    """CPU seconds of this process (every thread, librdkafka's too) and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured_with_client(brokers: list, run_round) -> tuple[float, float, float]:
    """(wall s, brokers' CPU s, client CPU s) of one round."""
    before = _client_cpu_s()
    wall_s, server_s = measured(brokers, run_round)
    return wall_s, server_s, _client_cpu_s() - before


def run(records: int, record_bytes: int, repeats: int, brokers: int = 1,
        codecs: tuple[str, ...] = ()) -> dict:
    """`brokers`: 1, or an odd cluster size (every broker's CPU, summed); `codecs`: Kafka
    compression types of the compressed steps (none: no compressed steps)."""
    values = [bytes([i % 251]) * record_bytes for i in range(records)]
    # Out of the collector's sight: the clients run in this process, and with a million values
    # (and the objects around them) tracked, the consumer's collections tripled its time per
    # record (1M records of 100 B, one broker: 204k records/s, 634k with the collector off).
    gc.freeze()
    # Filled in the order of each round's steps below: (wall s, brokers' CPU s, client CPU s).
    rounds: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        cluster = BenchCluster(Path(tmp), brokers, "kafka", kafka=True)
        kaska, kafka = cluster.bootstrap, cluster.kafka_bootstrap
        try:
            create_topic(cluster)  # and a leader elected
            cluster.agreed_leader()
            brokers_all = list(cluster.brokers.values())
            with Admin(kaska) as admin:
                for index in range(repeats):
                    admin.create_topic(f"kafka{index}")
                    admin.create_topic(f"kafkabatch{index}")
                    admin.create_topic(f"kaska{index}")
                    for codec in codecs:
                        admin.create_topic(f"kafka{codec}{index}")
            for index in range(repeats):
                steps_of_round = {
                    "kafka_produce": lambda i=index: kafka_produce(kafka, f"kafka{i}", values),
                    "kafka_consume": lambda i=index: kafka_consume(kafka, f"kafka{i}", records),
                    "kcat_consume": lambda i=index: kcat_consume(kafka, f"kafka{i}", records),
                    "kafka_produce_batch": lambda i=index: kafka_produce_batches(
                        kafka, f"kafkabatch{i}", values),
                    "kaska_produce": lambda i=index: kaska_produce(kaska, f"kaska{i}", values),
                    "kaska_consume": lambda i=index: kaska_consume(kaska, f"kaska{i}", records),
                }
                for codec in codecs:
                    steps_of_round |= compressed_steps(kafka, kaska, f"kafka{codec}{index}",
                                                       codec, values)
                for step, run_round in steps_of_round.items():
                    rounds[step].append(measured_with_client(brokers_all, run_round))
        finally:
            cluster.stop()
    volume_mb = records * record_bytes / MB
    summary: dict[str, float | int] = {"brokers": brokers, "records": records,
                                       "record_bytes": record_bytes, "repeats": repeats}
    for step, measurements in rounds.items():
        summary[f"{step}_records_per_s"] = round(
            records / statistics.median(wall for wall, _cpu, _client in measurements))
        summary[f"{step}_server_cpu_ms_per_mb"] = round(
            statistics.median(cpu for _wall, cpu, _client in measurements) * 1000 / volume_mb, 1)
        summary[f"{step}_client_cpu_ms_per_mb"] = round(
            statistics.median(client for _wall, _cpu, client in measurements) * 1000
            / volume_mb, 1)
    return summary

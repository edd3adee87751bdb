"""What each on-disk format choice for the Kafka listener costs, per MB, in one process.

The two designs (docs/kafka.md, "On-disk format"):
  A. Kaska's batch on disk, Kafka's transcoded at the edge (chosen): a Kafka produce pays
     `kafka_produce` (CRC, walk every record, re-frame), a Kafka fetch `kafka_fetch` (re-frame,
     CRC); Kaska's own produce and fetch pay nothing (recv_into the map, sendfile).
  B. Kafka's RecordBatch v2 on disk: a Kafka produce pays `kafka_validate` (CRC and the same
     walk: a broker must not store records it cannot serve), a Kafka fetch nothing (sendfile);
     Kaska's produce pays `kaska_produce_to_v2` (Kaska records to Kafka's), Kaska's fetch
     `kaska_fetch_from_v2` (Kafka's back to Kaska's) -- plus storage, recovery, replication
     and dedup rewritten for a second format.

Every figure is the CPU time (process_time) of one MB of record values, the median over
`repeats`; `crc32c` is the floor both designs pay at least once. Pure computation, no sockets.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from common.kaska.kafka_record import check_record, read_varint
from common.kaska.record_batch import encode_batch, parse_header, stamp
from services.broker.kafka import records
from services.broker.kafka.records import (
    KAFKA_CRC_COVERED_FROM,
    KAFKA_HEADER_BYTES,
    kafka_to_kaska,
    kaska_to_kafka,
)

MB = 1_000_000


def kafka_batch(record_bytes: int, total_bytes: int) -> tuple[bytes, int]:
    """(an idempotent Kafka v2 batch of about total_bytes of values, its record count)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=7, producer_epoch=0, base_sequence=0,
                                        batch_size=2 * total_bytes)
    count = 0
    while count * record_bytes < total_bytes:
        builder.append(count, timestamp=1_700_000_000_000 + count, key=None,
                       value=os.urandom(record_bytes), headers=[])
        count += 1
    return bytes(builder.build()), count


def validate_only(kafka: bytes, count: int) -> None:
    """Design B's produce: the CRC and the walk of every record. With the C loop built
    (records.native) that walk is the produce walk itself, whose copy of the records is then
    included (an upper bound: a C walk without it would be a few percent cheaper); without
    it, the Python walk with nothing copied."""
    view = memoryview(kafka)
    crc32c.crc32c(view[KAFKA_CRC_COVERED_FROM:])
    if records.native is not None:
        records.native.kaska_records(view, KAFKA_HEADER_BYTES, count)
        return
    pos = KAFKA_HEADER_BYTES
    for index in range(count):
        length, pos = read_varint(view, pos)
        check_record(view[pos:pos + length], index)
        pos += length


def _cpu_s(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return statistics.median(times)


def measure(record_bytes: int, repeats: int) -> dict[str, float]:
    """ms of CPU per MB of values for each step named in the module docstring."""
    kafka, count = kafka_batch(record_bytes, MB)
    values = [os.urandom(record_bytes) for _ in range(count)]
    stored_from_kafka = bytearray(kafka_to_kaska(kafka))
    stamp(stored_from_kafka, 0, 1)
    stored_from_kaska = bytearray(encode_batch(values))
    stamp(stored_from_kaska, 0, 1)
    kafka_of_kaska = kaska_to_kafka(stored_from_kaska, parse_header(stored_from_kaska))
    steps: dict[str, Callable[[], object]] = {
        "crc32c": lambda: crc32c.crc32c(kafka),
        "kafka_produce": lambda: kafka_to_kaska(kafka),
        "kafka_fetch": lambda: kaska_to_kafka(stored_from_kafka,
                                              parse_header(stored_from_kafka)),
        "kafka_fetch_of_kaska_records": lambda: kaska_to_kafka(
            stored_from_kaska, parse_header(stored_from_kaska)),
        # Design B's steps: the same walk without the copy, and the two Kaska directions.
        "kafka_validate": lambda: validate_only(kafka, count),
        "kaska_produce_to_v2": lambda: kaska_to_kafka(stored_from_kaska,
                                                      parse_header(stored_from_kaska)),
        "kaska_fetch_from_v2": lambda: kafka_to_kaska(kafka_of_kaska),
    }
    scale = MB / (count * record_bytes)
    return {f"{name}_ms_per_mb": round(_cpu_s(work, repeats) * 1000 * scale, 1)
            for name, work in steps.items()}

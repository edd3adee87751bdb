"""A stand-in for the query service in client tests: follows `sessions`, answers each ended
session from the rows its topics really hold, with the plain-Python reference of docs/queries.md.

For each SessionEnded it reads every partition of `airports.<cid>` and `flights.<cid>` up to
the announced end offsets, computes Q1-Q4 with oracle/reference.py, formats them with
common/flights/result_csv.py, and writes ResultRows slices of `rows_per_slice` then QueryDone per
query. With `duplicates=True` it also writes every slice and every QueryDone a second time
(with fresh sequence numbers, so the broker stores both copies), as a re-run service could.

Also exports `read_data_topic`, which tests use to count what the broker stored.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from common.flights.arrow_rows import ROW_ID, decode_rows
from common.flights.result_csv import format_row
from common.flights.session_records import (
    SESSIONS_TOPIC,
    QueryDone,
    ResultRows,
    SessionEnded,
    airports_topic,
    decode,
    encode,
    flights_topic,
    results_topic,
)
from common.kaska import Admin, Consumer, Producer
from common.kaska.errors import TopicAlreadyExistsError
from oracle.reference import airport_coordinates, compute

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredBatch:
    partition: int
    offset: int
    producer_id: bytes
    sequence: int
    rows: list[dict]


def read_data_topic(brokers: str, topic: str, end_offsets: list[int]) -> list[StoredBatch]:
    """Every record of `topic` below `end_offsets`, decoded, in partition then offset order."""
    stored = []
    with Consumer(brokers, group="test-reader") as consumer:
        for partition, end in enumerate(end_offsets):
            if end == 0:
                continue
            consumer.unsubscribe()
            consumer.seek(topic, 0, partition)
            while consumer.position(topic, partition) < end:
                message = consumer.poll(5.0)
                assert message is not None, f"{topic}/{partition} ends before {end}"
                stored.append(StoredBatch(partition, message.offset, message.producer_id,
                                          message.sequence,
                                          decode_rows(message.value).to_pylist()))
    return stored


def reference_results(brokers: str, ended: SessionEnded):
    cid = ended.client_id
    airports = [row for batch in read_data_topic(brokers, airports_topic(cid),
                                                 ended.end_offsets[airports_topic(cid)])
                for row in batch.rows]
    flights = [row for batch in read_data_topic(brokers, flights_topic(cid),
                                                ended.end_offsets[flights_topic(cid)])
               for row in batch.rows]
    flights.sort(key=lambda row: row[ROW_ID])
    coordinates = airport_coordinates(
        {k: (None if v == "\\N" else v) for k, v in row.items()} for row in airports)
    return compute(flights, coordinates)


class FakeQueryService:
    def __init__(self, brokers: str, rows_per_slice: int = 3, duplicates: bool = True) -> None:
        self.brokers = brokers
        self.rows_per_slice = rows_per_slice
        self.duplicates = duplicates
        self.answered: dict[str, dict[str, list[list[str]]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-query-service",
                                        daemon=True)
        self.errors: list[BaseException] = []

    def start(self) -> FakeQueryService:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self.errors, self.errors

    def _run(self) -> None:
        try:
            with Consumer(self.brokers, group="fake-service") as consumer:
                self._follow(consumer)
        except BaseException as error:  # handed to the test thread through stop()
            self.errors.append(error)
            raise

    def _follow(self, consumer: Consumer) -> None:
        with Admin(self.brokers) as admin:
            try:
                admin.create_topic(SESSIONS_TOPIC, 1)
            except TopicAlreadyExistsError:
                pass  # a client made it first
        consumer.seek(SESSIONS_TOPIC, 0, 0)
        seen: set[str] = set()
        while not self._stop.is_set():
            message = consumer.poll(0.2)
            if message is None:
                continue
            record = decode(message.value)
            if isinstance(record, SessionEnded) and record.client_id not in seen:
                seen.add(record.client_id)
                self._answer(record)

    def _answer(self, ended: SessionEnded) -> None:
        results = reference_results(self.brokers, ended)
        formatted = {query: [format_row(query, row) for row in rows]
                     for query, rows in results.by_query().items()}
        invalid = {kind: n for kind, n in results.invalid_counts.items() if n}
        topic = results_topic(ended.client_id)
        with Producer(self.brokers) as producer:
            for query, rows in formatted.items():
                for first in range(0, len(rows), self.rows_per_slice):
                    record = encode(ResultRows(query, first, rows[first:first +
                                                                 self.rows_per_slice]))
                    for _ in range(2 if self.duplicates else 1):
                        producer.send_msg(topic, record)
                for _ in range(2 if self.duplicates else 1):
                    producer.send_msg(topic, encode(QueryDone(query, len(rows), invalid)))
        self.answered[ended.client_id] = formatted

"""Q1-Q4 from the CSV files against Q1-Q4 through the `kaska` source, in one Spark
application: the library of `python -m scripts.bench_queries` (scripts/bench_queries.py says
what is timed).

Owns the loader (`produce_session`: a whole client session, topics, SessionStarted, data
batches, SessionEnded, written with the client library directly; the service tests use it
too), the broker child, the Spark session and the two timed paths.
Invariants: loading is untimed; "computes" means every query's rows collected to the driver
(plus the counts job), as the query service does.
Threads: the caller's (Spark's own aside); the broker is a child process.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from common.flights.arrow_rows import encode_rows, with_row_ids
from common.flights.session_records import (
    SESSIONS_TOPIC,
    SessionEnded,
    SessionStarted,
    airports_topic,
    encode,
    flights_topic,
    results_topic,
)
from common.kaska import Admin, Producer
from common.kaska.errors import TopicAlreadyExistsError
from scripts.launcher.local_cluster import BrokerSpec, broker_argv

SLICE_ROWS_DEFAULT = 300
PARTITIONS_DEFAULT = 4
AIRPORTS_NULL_TEXT = "\\N"
BROKER_READY_TIMEOUT_S = 60.0
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class QueriesBenchSettings:
    """One run: the input (a sample of `rows` generated with `seed`), how it is loaded
    (`slice_rows` CSV rows per payload over `partitions`), the Spark master, the timed
    `repeats` after untimed `warmups`."""

    rows: int
    seed: int
    invalid_rate: float
    data_dir: Path | None  # the input (generated there when absent); None: a temporary one
    slice_rows: int
    partitions: int
    master: str
    repeats: int
    warmups: int


# --- loading a session, as a client does ------------------------------------------------------


def csv_slices(path: Path, delimiter: str, slice_rows: int,
               null_text: str | None = None) -> Iterator[pa.RecordBatch]:
    """The file's rows as Arrow batches of `slice_rows` rows: every column a string named by
    the header, plus `row_id`. Like Spark's permissive CSV reader, a short row is padded with
    nulls and a long one cut to the header's width; `null_text` fields become null."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header = next(reader)
        width = len(header)
        schema = pa.schema([(name, pa.string()) for name in header])
        rows: list[list[str | None]] = []
        first_row_id = 0
        for row in reader:
            if len(row) != width:
                row = (row + [None] * width)[:width]
            if null_text is not None:
                row = [None if field == null_text else field for field in row]
            rows.append(row)
            if len(rows) == slice_rows:
                yield with_row_ids(_batch(schema, rows), first_row_id)
                first_row_id += len(rows)
                rows = []
        if rows:
            yield with_row_ids(_batch(schema, rows), first_row_id)


def _batch(schema: pa.Schema, rows: list[list[str | None]]) -> pa.RecordBatch:
    columns = [pa.array(column, pa.string()) for column in zip(*rows, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def ensure_topic(admin: Admin, name: str, partitions: int) -> None:
    try:
        admin.create_topic(name, partitions)
    except TopicAlreadyExistsError:
        pass  # a rerun, or another party made it: either way it is there


def load_topic(producer: Producer, topic: str, partitions: int,
               slices: Iterator[pa.RecordBatch]) -> tuple[list[int], int]:
    """Produce each slice as one batch, slice k to partition k % P with message id k // P;
    (end offset per partition, rows sent)."""
    ends = [0] * partitions
    rows = 0
    for index, batch in enumerate(slices):
        partition, message_id = index % partitions, index // partitions
        offset = producer.send_batch(topic, partition, [encode_rows(batch)], sequence=message_id)
        ends[partition] = offset + 1
        rows += batch.num_rows
    return ends, rows


@dataclass(frozen=True)
class LoadedSession:
    client_id: str
    ended: SessionEnded
    seconds: float


def produce_session(brokers: str, flights_path: Path, airports_path: Path, *,
                    client_id: str | None = None, partitions: int = PARTITIONS_DEFAULT,
                    slice_rows: int = SLICE_ROWS_DEFAULT, end_session: bool = True,
                    **client_options) -> LoadedSession:
    """A whole client session through the client library, in the client's order: topics, the
    airports, SessionStarted with their end offsets, the flights, then (with `end_session`)
    SessionEnded with the exact end offsets."""
    started = time.perf_counter()
    client_id = client_id or str(uuid.uuid4())
    with Admin(brokers, **client_options) as admin:
        ensure_topic(admin, SESSIONS_TOPIC, 1)
        for topic, count in ((airports_topic(client_id), partitions),
                             (flights_topic(client_id), partitions),
                             (results_topic(client_id), 1)):
            ensure_topic(admin, topic, count)
    with Producer(brokers, producer_id=client_id, **client_options) as producer:
        airport_ends, airport_rows = load_topic(
            producer, airports_topic(client_id), partitions,
            csv_slices(airports_path, ";", slice_rows, AIRPORTS_NULL_TEXT))
        producer.send_msg(SESSIONS_TOPIC, encode(SessionStarted(client_id, partitions,
                                                                airport_ends)))
        flight_ends, flight_rows = load_topic(
            producer, flights_topic(client_id), partitions,
            csv_slices(flights_path, ",", slice_rows))
        ended = SessionEnded(
            client_id=client_id,
            end_offsets={airports_topic(client_id): airport_ends,
                         flights_topic(client_id): flight_ends},
            rows_sent={"airports": airport_rows, "flights": flight_rows})
        if end_session:
            producer.send_msg(SESSIONS_TOPIC, encode(ended))
    return LoadedSession(client_id, ended, time.perf_counter() - started)


# --- the benchmark ----------------------------------------------------------------------------


class BrokerChild:
    """A broker child process on 127.0.0.1 (any free port) for the benchmark's duration."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen | None = None
        self.address = ""

    def __enter__(self) -> BrokerChild:
        spec = BrokerSpec(1, self.data_dir, extra_args=("--log-level", "WARNING"))
        command = [sys.executable, *broker_argv(spec)]
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        line = self.proc.stdout.readline().strip()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"broker did not start: {line!r}")
        self.address = line.rsplit(" ", 1)[1]
        return self

    def __exit__(self, *exc_info) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def spark_session(master: str):
    from pyspark.sql import SparkSession

    from spark.source.kaska_source import register

    session = (SparkSession.builder.master(master).appName("bench-queries")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.memory", "4g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def run_queries(flights, airports) -> dict[str, int]:
    """The four queries fully evaluated (rows collected, as the service does); row counts."""
    from scripts.bench.spark_csv import compute_all

    results = compute_all(flights, airports)
    try:
        counts = {query: len(frame.collect()) for query, frame in results.frames().items()}
    finally:
        results.release()
    counts["rows"] = results.rows
    return counts


def csv_frames(spark, flights_path: Path, airports_path: Path):
    from scripts.bench.spark_csv import read_airports_csv, read_flights_csv

    return read_flights_csv(spark, str(flights_path)), read_airports_csv(spark, str(airports_path))


def kaska_frames(spark, brokers: str, ended: SessionEnded):
    from spark.rules.contract import AIRPORT_COLUMNS, FLIGHT_COLUMNS

    return tuple(kaska_frame(spark, brokers, topic, ended.end_offsets[topic], columns)
                 for topic, columns in ((flights_topic(ended.client_id), FLIGHT_COLUMNS),
                                        (airports_topic(ended.client_id), AIRPORT_COLUMNS)))


def kaska_frame(spark, brokers: str, topic: str, ends: list[int], columns):
    from spark.source.kaska_source import SOURCE_NAME, offsets_json

    return (spark.read.format(SOURCE_NAME).option("brokers", brokers).option("topic", topic)
            .option("startingOffsets", offsets_json(topic, [0] * len(ends)))
            .option("endingOffsets", offsets_json(topic, ends))
            .option("columns", json.dumps(list(columns))).load())


def timed(run) -> tuple[float, dict]:
    started = time.perf_counter()
    counts = run()
    return time.perf_counter() - started, counts


def bench(settings: QueriesBenchSettings) -> dict:
    from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE, generate

    data_dir = settings.data_dir or Path(tempfile.gettempdir()) / f"bench-queries-{settings.rows}"
    flights_path, airports_path = data_dir / FLIGHTS_FILE, data_dir / AIRPORTS_FILE
    if not (flights_path.exists() and airports_path.exists()):
        generate(data_dir, settings.rows, settings.seed, settings.invalid_rate)
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as broker_dir, \
            BrokerChild(Path(broker_dir)) as broker:
        loaded = produce_session(broker.address, flights_path, airports_path,
                                 partitions=settings.partitions, slice_rows=settings.slice_rows)
        spark = spark_session(settings.master)
        try:
            runs = {"csv": [], "kaska": []}
            counts = {}
            for _ in range(settings.warmups):  # JIT, Python workers, caches: untimed
                run_queries(*csv_frames(spark, flights_path, airports_path))
                run_queries(*kaska_frames(spark, broker.address, loaded.ended))
            for _ in range(settings.repeats):
                seconds, counts["csv"] = timed(
                    lambda: run_queries(*csv_frames(spark, flights_path, airports_path)))
                runs["csv"].append(round(seconds, 3))
                seconds, counts["kaska"] = timed(
                    lambda: run_queries(*kaska_frames(spark, broker.address, loaded.ended)))
                runs["kaska"].append(round(seconds, 3))
        finally:
            spark.stop()
    if counts["csv"] != counts["kaska"]:
        raise RuntimeError(f"the two paths disagree: {counts}")
    csv_s, kaska_s = statistics.median(runs["csv"]), statistics.median(runs["kaska"])
    return {"rows": settings.rows, "slice_rows": settings.slice_rows,
            "partitions": settings.partitions, "warmups": settings.warmups,
            "master": settings.master, "load_s": round(loaded.seconds, 2), "csv_s": csv_s,
            "kaska_s": kaska_s, "kaska_over_csv": round(kaska_s / csv_s, 3), "runs": runs,
            "result_rows": counts["csv"]}

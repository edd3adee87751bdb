"""Broker throughput against the raw loopback ceilings: the library of
`python -m scripts.bench_broker` (scripts/bench_broker.py says what each round measures and what
the JSON line holds).

Owns the ceiling helpers (`serve_mmap_sink`, `serve_sendfile_source`; `helper_main` is their
process), the four rounds (ceiling in, produce, ceiling out, consume), `run` (one whole run)
and `summarize` (medians and ratios).
Invariants: the rounds interleave, so the machine's noise is shared; each round writes a fresh
topic and deletes it (the sink drops its file) outside the timed part; the client is always
this process and the server another, for the ceilings as for the broker.
Threads: the caller's; every server (broker, helpers) is a child process (bench/child.py).
"""

from __future__ import annotations

import mmap
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common.kaska import Admin
from common.kaska.connection import BrokerConnection
from common.kaska.protocol import FetchRequest
from common.kaska.record_batch import (
    iter_batches,
    iter_records,
)
from scripts.bench.child import Child, measured, timed
from scripts.bench.produce import BROKER_TIMEOUT_S, build_batches, produce
from scripts.launcher.local_cluster import BrokerSpec, broker_argv

MB = 1_000_000
TOTAL = struct.Struct(">Q")
ACK = b"\x01"
RECV_CHUNK_BYTES = 4 * 1024 * 1024  # recv_into this much at most per call in the ceilings
IN_FLIGHT_DEFAULT = 4  # as a Kafka producer's max.in.flight (5 with idempotence)
BATCH_BYTES_MAX = 32 * 1024 * 1024  # well inside the broker's default 64 MiB segments


@dataclass(frozen=True)
class BrokerBenchSettings:
    """One run: `repeats` rounds of `records` records of `record_bytes` in batches of about
    `batch_bytes`, up to `in_flight` produce requests unanswered, fetches of `fetch_bytes`."""

    records: int
    record_bytes: int
    batch_bytes: int
    fetch_bytes: int
    in_flight: int
    repeats: int


# -- helper processes ------------------------------------------------------------------------


def recv_exactly_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:got + RECV_CHUNK_BYTES])
        if n == 0:
            raise ConnectionError(f"stream ended {len(view) - got} bytes short")
        got += n


def serve_mmap_sink(listener: socket.socket, directory: Path) -> None:
    """Each connection: a u64 byte count, then that many bytes received straight into a fresh
    sparse file mapped like a broker segment, answered with one byte. The file stays mapped
    until a connection announcing 0 bytes (answered once it is unmapped and deleted): like a
    broker's deleted topic, its teardown is not part of the timed round."""
    path = directory / "sink.bin"
    kept: tuple[int, mmap.mmap] | None = None
    while True:
        sock, _ = listener.accept()
        with sock:
            header = bytearray(TOTAL.size)
            recv_exactly_into(sock, memoryview(header))
            (total,) = TOTAL.unpack(header)
            if kept is not None:
                kept[1].close()
                os.close(kept[0])
                path.unlink()
                kept = None
            if total:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                os.ftruncate(fd, total)
                mm = mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                kept = (fd, mm)
                with memoryview(mm) as view:
                    recv_exactly_into(sock, view)
            sock.sendall(ACK)


def serve_sendfile_source(listener: socket.socket, path: Path) -> None:
    """Each connection: a u64 byte count, answered by sending that many bytes of `path` with
    os.sendfile (the file is in the page cache, as a broker's fresh segments are)."""
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    while True:
        sock, _ = listener.accept()
        with sock:
            header = bytearray(TOTAL.size)
            recv_exactly_into(sock, memoryview(header))
            (total,) = TOTAL.unpack(header)
            assert total <= size
            sent = 0
            while sent < total:
                sent += os.sendfile(sock.fileno(), fd, sent, total - sent)


def helper_main(role: str, where: Path) -> int:
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    if role == "mmap-sink":
        serve_mmap_sink(listener, where)
    else:
        serve_sendfile_source(listener, where)
    return 0


def helper(role: str, where: Path, log_path: Path) -> Child:
    return Child([sys.executable, "-m", "scripts.bench_broker", "--serve", role,
                  "--where", str(where)], log_path)


# -- the rounds ------------------------------------------------------------------------------


def ceiling_in(address: tuple[str, int], batches: list[bytes]) -> None:
    """The batches to the mmap sink (no batches: it drops what it holds)."""
    total = sum(len(batch) for batch in batches)
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(TOTAL.pack(total))
        for batch in batches:
            sock.sendall(batch)
        ack = bytearray(1)
        recv_exactly_into(sock, memoryview(ack))


def ceiling_out(address: tuple[str, int], total: int, buffer: bytearray) -> None:
    view = memoryview(buffer)
    with socket.create_connection(address) as sock:
        sock.sendall(TOTAL.pack(total))
        got = 0
        while got < total:
            n = sock.recv_into(view[:min(len(view), total - got)])
            if n == 0:
                raise ConnectionError("the sendfile source stopped early")
            got += n


def consume(connection: BrokerConnection, topic: str, fetch_bytes: int,
            expected_records: int, decode: bool = False) -> int:
    """FETCH every batch of the topic, CRC-check it and count its records (with `decode`,
    also split every record out, as an application reading them one by one does)."""
    offset = 0
    decoded = 0
    while offset < expected_records:
        response = connection.request(FetchRequest(topic, 0, offset, fetch_bytes, 0))
        for header, batch in iter_batches(response.records):
            offset = header.next_offset
            if decode:
                decoded += sum(1 for _ in iter_records(batch, header))
    assert offset == expected_records, (offset, expected_records)
    assert not decode or decoded == expected_records
    return decoded


def run(settings: BrokerBenchSettings) -> dict:
    batches = build_batches(settings.records, settings.record_bytes, settings.batch_bytes)
    wire_bytes = sum(len(batch) for batch in batches)
    payload_bytes = settings.records * settings.record_bytes
    work = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    children: list[Child] = []
    try:
        source_file = work / "source.bin"
        with open(source_file, "wb") as out:
            for batch in batches:
                out.write(batch)
        (work / "sink").mkdir()
        spec = BrokerSpec(1, work / "data", extra_args=("--log-level", "WARNING"))
        broker = Child([sys.executable, *broker_argv(spec)], work / "broker.log")
        children.append(broker)
        sink = helper("mmap-sink", work / "sink", work / "sink.log")
        children.append(sink)
        source = helper("sendfile-source", source_file, work / "source.log")
        children.append(source)
        bootstrap = f"{broker.address[0]}:{broker.address[1]}"
        receive_buffer = bytearray(RECV_CHUNK_BYTES)
        rounds: dict[str, list[tuple[float, float]]] = {
            "ceiling_in": [], "produce": [], "ceiling_out": [], "consume": []}
        with Admin(bootstrap) as admin:
            for repeat in range(settings.repeats):
                topic = f"bench{repeat}"
                admin.create_topic(topic)
                connection = BrokerConnection(broker.address,
                                              request_timeout_s=BROKER_TIMEOUT_S)
                try:
                    rounds["ceiling_in"].append(measured(sink, lambda: ceiling_in(
                        sink.address, batches)))
                    rounds["produce"].append(measured(broker, lambda t=topic, c=connection:
                                                      produce(c, t, batches, settings.in_flight)))
                    rounds["ceiling_out"].append(measured(source, lambda: ceiling_out(
                        source.address, wire_bytes, receive_buffer)))
                    rounds["consume"].append(measured(broker, lambda t=topic, c=connection:
                                                      consume(c, t, settings.fetch_bytes,
                                                              settings.records)))
                    if repeat == settings.repeats - 1:  # once: Python per record is slow
                        decode_s = timed(lambda t=topic, c=connection: consume(
                            c, t, settings.fetch_bytes, settings.records, decode=True))
                finally:
                    connection.close()
                admin.delete_topic(topic)
                ceiling_in(sink.address, [])
    finally:
        for child in children:
            child.stop()
        shutil.rmtree(work, ignore_errors=True)
    return summarize(settings, rounds, payload_bytes, wire_bytes, decode_s)


def summarize(settings: BrokerBenchSettings, rounds: dict[str, list[tuple[float, float]]],
              payload_bytes: int, wire_bytes: int, decode_s: float) -> dict:
    median = {name: statistics.median(wall for wall, _ in runs) for name, runs in rounds.items()}
    cpu_per_gb = {name: round(statistics.median(cpu for _, cpu in runs) / wire_bytes * 1e9, 3)
                  for name, runs in rounds.items()}
    return {
        "load_average_1min": round(os.getloadavg()[0], 2),  # the machine is shared: noise
        "records": settings.records, "record_bytes": settings.record_bytes,
        "batch_bytes": settings.batch_bytes, "fetch_bytes": settings.fetch_bytes,
        "in_flight": settings.in_flight,
        "repeats": settings.repeats, "wire_bytes": wire_bytes,
        "produce_records_per_s": round(settings.records / median["produce"]),
        "produce_mb_per_s": round(payload_bytes / median["produce"] / MB, 1),
        "consume_records_per_s": round(settings.records / median["consume"]),
        "consume_mb_per_s": round(payload_bytes / median["consume"] / MB, 1),
        "ceiling_recv_into_mmap_mb_per_s": round(wire_bytes / median["ceiling_in"] / MB, 1),
        "ceiling_sendfile_mb_per_s": round(wire_bytes / median["ceiling_out"] / MB, 1),
        "produce_vs_ceiling": round(median["ceiling_in"] / median["produce"], 3),
        "consume_vs_ceiling": round(median["ceiling_out"] / median["consume"], 3),
        "consume_decoded_records_per_s": round(settings.records / decode_s),
        "server_cpu_s_per_gb": cpu_per_gb,  # broker for produce/consume, helper for ceilings
        "seconds": {name: [round(wall, 4) for wall, _ in runs] for name, runs in rounds.items()},
    }

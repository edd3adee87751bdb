"""Random and mutated Kaska request frames, and a client that throws them at a broker.

`FrameFactory(rng)` builds frames from valid templates of every API and mutates them: bit
flips in the body or the header, truncations, length-field lies, huge lengths, random api and
version numbers, garbage bodies, hostile topic names, oversized frames, pipelined frames,
partial headers. Every frame knows whether its length field matches the bytes sent
(`framed`): a framed request must be answered exactly once with its correlation id (or be
refused with a closing error); an unframed one leaves the stream out of step, so the fuzzer
half-closes the connection and reads whatever answers come until the broker closes it.

`FuzzClient` sends frames over a connection it reopens whenever the broker closes it, and
counts answers by error code. Same seed, same frames.
"""

from __future__ import annotations

import random
import socket
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import crc32c

from common.kaska.errors import AuthenticationError, FrameTooLargeError
from common.kaska.protocol import (
    Api,
    AuthenticateRequest,
    CommitOffsetRequest,
    FetchCommittedRequest,
    FetchRequest,
    ListOffsetsRequest,
    ListTopicsRequest,
    MessageLengthRequest,
    MetadataRequest,
)
from common.kaska.protocol.codec import BodyWriter
from common.kaska.protocol.frames import REQUEST_HEADER, RESPONSE_HEADER
from common.kaska.record_batch import HEADER_BYTES, NO_PRODUCER, encode_batch
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest
from services.broker.replication.wire.snapshot_fetch import SnapshotFetchRequest
from services.broker.replication.wire.vote import VoteRequest

FUZZ_TOPICS = ("fz0", "fz1", "fz2")  # created before the fuzz; frames also create and delete
HOSTILE_TOPICS = (
    b"../escape", b"a/b", b"/etc", b"nul\x00byte", b"..", b".", b"", b"@lock", b"@staging",
    b"@deleted", b"__offsets", b"\xff\xfe\xfd", "é".encode() * 200, b"x" * 250,
    b"x" * 65_535, b"fz0/../../up", b"fz0\n", b" fz0", b"fz0 ", b"CON", b"-", b"\x7f",
)
PRODUCER_IDS = (NO_PRODUCER, bytes(range(16)), bytes(range(1, 17)))
WIRE_CODE_BITS = 16
CLOSING_CODES = (FrameTooLargeError.code, AuthenticationError.code)  # answered, then closed


# (position, struct format) of the batch header fields a producer writes (record_batch.py).
BATCH_FIELDS = ((20, ">H"), (22, ">H"), (24, ">I"), (44, ">q"), (52, ">q"))


def _fit(value: int, field_format: str) -> int:
    """`value` wrapped into the range of a struct field."""
    bits = struct.calcsize(field_format) * 8
    value %= 1 << bits
    signed = field_format[-1].islower()
    return value - (1 << bits) if signed and value >= 1 << (bits - 1) else value


@dataclass(frozen=True, slots=True)
class Frame:
    data: bytes
    framed: bool  # the length field matches the bytes: one answer, in step
    kind: str
    frames: int = 1  # requests inside (a pipeline holds several)


def request_frame(api: int, body: bytes, correlation_id: int, version: int = 0) -> bytes:
    return REQUEST_HEADER.pack(8 + len(body), api, version, correlation_id) + body


def signed_code(code: int) -> int:
    return code - (1 << WIRE_CODE_BITS) if code >= 1 << (WIRE_CODE_BITS - 1) else code


class FrameFactory:
    """Seeded source of frames; `frame_bytes_max` is the broker's bound (oversized frames)."""

    def __init__(self, rng: random.Random, frame_bytes_max: int) -> None:
        self.rng = rng
        self.frame_bytes_max = frame_bytes_max
        self._correlation_id = 0
        self._mutations: list[tuple[int, Callable[[], Frame]]] = [
            (8, self._valid), (18, self._bit_flip_body), (6, self._bit_flip_header),
            (8, self._truncated_body), (4, self._truncated_frame), (5, self._length_lie),
            (3, self._huge_length), (6, self._random_api), (8, self._garbage_body),
            (12, self._hostile_topic), (1, self._oversized), (4, self._pipeline),
            (2, self._partial_header), (2, self._short_length), (8, self._crafted_batch),
        ]
        self._weights = [weight for weight, _ in self._mutations]

    def next(self) -> Frame:
        (make,) = self.rng.choices([make for _, make in self._mutations], self._weights)
        return make()

    # -- valid bodies of every API ----------------------------------------------------------

    def _cid(self) -> int:
        self._correlation_id = (self._correlation_id + 1) % (1 << 32)
        return self._correlation_id

    def _topic(self) -> str:
        rng = self.rng
        return rng.choice(FUZZ_TOPICS) if rng.random() < 0.8 else f"fz{rng.randint(3, 12)}"

    def _partition(self) -> int:
        return self.rng.randint(0, 3)

    def _batch(self) -> bytes:
        rng = self.rng
        records = [rng.randbytes(rng.randint(0, 200)) for _ in range(rng.randint(1, 20))]
        producer_id = rng.choice(PRODUCER_IDS)
        sequence = -1 if producer_id == NO_PRODUCER else rng.randint(0, 6)
        return encode_batch(records, producer_id=producer_id, sequence=sequence)

    def valid_body(self, api: Api, topic: bytes | None = None) -> bytes:
        """A well-formed body for `api`; `topic` (raw bytes) replaces the topic name."""
        rng = self.rng
        raw = topic if topic is not None else self._topic().encode()
        # The topic goes in raw, so hostile names can be anything the u16 prefix can carry.
        head = BodyWriter().short_bytes(raw).getvalue()
        partition = self._partition()
        if api == Api.PRODUCE:
            return head + struct.pack(">Ih", partition, rng.choice((1, -1))) + self._batch()
        if api == Api.FETCH:
            request = FetchRequest("x", partition, rng.randint(0, 60), rng.randint(0, 1 << 20),
                                   rng.randint(0, 20))
            return head + request.encode()[3:]
        if api in (Api.LIST_OFFSETS,):
            return head + ListOffsetsRequest("x", partition).encode()[3:]
        if api == Api.MESSAGE_LENGTH:
            return head + MessageLengthRequest("x", partition, rng.randint(0, 60)).encode()[3:]
        if api == Api.CREATE_TOPIC:
            return head + struct.pack(">I", rng.choice((1, 1, 2, 3, 4, 0, 1025)))
        if api == Api.DELETE_TOPIC:
            return head
        if api == Api.METADATA:
            names = [raw] + [self._topic().encode() for _ in range(rng.randint(0, 3))]
            writer = BodyWriter().u32(len(names))
            for name in names:
                writer.short_bytes(name)
            return writer.getvalue() if rng.random() < 0.8 else MetadataRequest().encode()
        if api == Api.LIST_TOPICS:
            return ListTopicsRequest(rng.random() < 0.5).encode()
        group = BodyWriter().string(f"g{rng.randint(0, 3)}").getvalue()
        if api == Api.COMMIT_OFFSET:
            tail = CommitOffsetRequest("g", "x", partition, rng.randint(0, 1000)).encode()
            return group + head + tail[3 + 3:]
        if api == Api.FETCH_COMMITTED:
            return group + head + FetchCommittedRequest("g", "x", partition).encode()[3 + 3:]
        if api == Api.VOTE:
            # Unsigned, to a lone broker without a cluster secret: refused by its peer gate.
            return VoteRequest(rng.randint(-5, 5), rng.randint(-1, 1 << 31 - 1),
                               rng.randint(-1, 9), rng.randint(0, 1 << 40),
                               rng.random() < 0.5).encode()
        if api == Api.REPLICA_FETCH:
            return ReplicaFetchRequest(rng.randint(-5, 5), rng.randint(-1, 9),
                                       rng.randint(0, 1 << 40), rng.randint(-1, 9),
                                       rng.randint(0, 1 << 24), rng.randint(0, 20)).encode()
        if api == Api.SNAPSHOT_FETCH:
            # Unsigned too: refused by the peer gate like VOTE and REPLICA_FETCH.
            return SnapshotFetchRequest(rng.randint(-5, 5), rng.randint(-1, 9), self._topic(),
                                        rng.randint(-1, 9), rng.randint(0, 1 << 40),
                                        partition, rng.randint(0, 1 << 40),
                                        rng.randint(0, 1 << 40), rng.randint(0, 1 << 24)
                                        ).encode()
        if api == Api.DELETE_RECORDS:
            # Version 0 (no topic id); offsets from -1 (the high watermark) past any end,
            # partitions past the topic's; sometimes one named twice (refused whole).
            items = [(rng.randint(0, 5), rng.choice((-1, 0, rng.randint(0, 80), 1 << 40)))
                     for _ in range(rng.randint(0, 4))]
            writer = BodyWriter().u32(len(items))
            for item_partition, offset in items:
                writer.u32(item_partition).i64(offset)
            return head + writer.getvalue()
        assert api == Api.AUTHENTICATE, api
        return AuthenticateRequest(rng.randbytes(rng.randint(0, 40))).encode()

    def _framed(self, kind: str, api: int, body: bytes, version: int = 0) -> Frame:
        return Frame(request_frame(api, body, self._cid(), version), True, kind)

    def _any_api(self) -> Api:
        return self.rng.choice(list(Api))

    # -- mutations --------------------------------------------------------------------------

    def _valid(self) -> Frame:
        api = self._any_api()
        return self._framed("valid", api, self.valid_body(api))

    def _bit_flip_body(self) -> Frame:
        api = self._any_api()
        body = bytearray(self.valid_body(api))
        for _ in range(self.rng.randint(1, 8)):
            if body:
                position = self.rng.randrange(len(body))
                body[position] ^= 1 << self.rng.randrange(8)
        return self._framed("bit-flip-body", api, bytes(body))

    def _bit_flip_header(self) -> Frame:
        api = self._any_api()
        frame = bytearray(request_frame(api, self.valid_body(api), self._cid()))
        for _ in range(self.rng.randint(1, 3)):
            frame[self.rng.randrange(4, REQUEST_HEADER.size)] ^= 1 << self.rng.randrange(8)
        return Frame(bytes(frame), True, "bit-flip-header")

    def _truncated_body(self) -> Frame:
        api = self._any_api()
        body = self.valid_body(api)
        return self._framed("truncated-body", api, body[:self.rng.randint(0, len(body))])

    def _truncated_frame(self) -> Frame:
        api = self._any_api()
        frame = request_frame(api, self.valid_body(api), self._cid())
        return Frame(frame[:self.rng.randint(REQUEST_HEADER.size, len(frame) - 1)], False,
                     "truncated-frame")

    def _length_lie(self) -> Frame:
        api = self._any_api()
        body = self.valid_body(api)
        lie = self.rng.choice((self.rng.randint(0, 8 + len(body) - 1),
                               8 + len(body) + self.rng.randint(1, 5000)))
        return Frame(REQUEST_HEADER.pack(lie, api, 0, self._cid()) + body, False, "length-lie")

    def _huge_length(self) -> Frame:
        length = self.rng.choice((0xFFFFFFFF, 1 << 31, self.frame_bytes_max + 9,
                                  self.rng.randint(self.frame_bytes_max + 9, 0xFFFFFFFF)))
        api = self._any_api()
        body = self.valid_body(api)[:self.rng.randint(0, 64)]
        return Frame(REQUEST_HEADER.pack(length, api, 0, self._cid()) + body, False,
                     "huge-length")

    def _random_api(self) -> Frame:
        rng = self.rng
        api = rng.choice((rng.randint(0, 0xFFFF), rng.randint(11, 64), int(self._any_api())))
        version = rng.choice((0, 0, 1, rng.randint(0, 0xFFFF)))
        known = api if api in set(Api) else self._any_api()
        return self._framed("random-api", api, self.valid_body(Api(known)), version)

    def _garbage_body(self) -> Frame:
        api = self._any_api()
        body = self.rng.randbytes(self.rng.choice((0, 1, 2, self.rng.randint(0, 4096))))
        return self._framed("garbage-body", api, body)

    def _hostile_topic(self) -> Frame:
        api = self.rng.choice((Api.PRODUCE, Api.FETCH, Api.LIST_OFFSETS, Api.METADATA,
                               Api.CREATE_TOPIC, Api.DELETE_TOPIC, Api.MESSAGE_LENGTH,
                               Api.COMMIT_OFFSET, Api.FETCH_COMMITTED, Api.DELETE_RECORDS))
        body = self.valid_body(api, self.rng.choice(HOSTILE_TOPICS))
        if self.rng.random() < 0.2:  # a name "over 65,535 bytes": the u16 prefix lies
            body = b"\xff\xff" + b"y" * 70_000
        if len(body) + 8 > self.frame_bytes_max:
            return self._oversized()
        return self._framed("hostile-topic", api, body)

    def _crafted_batch(self) -> Frame:
        """A PRODUCE whose batch has random header fields or record lengths but a correct CRC:
        it gets past the checksum, so the broker's own bounds must catch what is wrong (and
        what it stores must not hurt later FETCH or MESSAGE_LENGTH requests)."""
        rng = self.rng
        batch = bytearray(self._batch())
        field_at, field_format = rng.choice(BATCH_FIELDS)
        value = rng.choice((0, 1, -1, rng.getrandbits(62), 1 << 31, 0xFFFF, 0xFFFFFFFF))
        if rng.random() < 0.3 and len(batch) >= HEADER_BYTES + 4:  # a record length instead
            field_at, field_format = HEADER_BYTES, ">I"
        struct.pack_into(field_format, batch, field_at, _fit(value, field_format))
        struct.pack_into(">I", batch, 16, crc32c.crc32c(memoryview(batch)[20:]))
        prefix = BodyWriter().string(self._topic()).getvalue()
        body = prefix + struct.pack(">Ih", self._partition(), 1) + bytes(batch)
        return self._framed("crafted-batch", Api.PRODUCE, body)

    def _oversized(self) -> Frame:
        api = self.rng.choice((Api.PRODUCE, self._any_api()))
        body = self.valid_body(api)
        body += bytes(self.frame_bytes_max + self.rng.randint(1, 4096) - len(body))
        # Answered FrameTooLarge unread and closed; the rest of what we send is never read.
        return Frame(request_frame(api, body, self._cid()), False, "oversized")

    def _pipeline(self) -> Frame:
        parts = [self.rng.choice((self._valid, self._bit_flip_body, self._garbage_body,
                                  self._truncated_body))() for _ in range(self.rng.randint(2, 6))]
        if self.rng.random() < 0.3:
            parts.append(self._length_lie())
        return Frame(b"".join(part.data for part in parts), False, "pipeline", len(parts))

    def _partial_header(self) -> Frame:
        frame = request_frame(Api.LIST_TOPICS, b"\x00", self._cid())
        return Frame(frame[:self.rng.randint(1, REQUEST_HEADER.size - 1)], False,
                     "partial-header")

    def _short_length(self) -> Frame:
        return Frame(REQUEST_HEADER.pack(self.rng.randint(0, 7), self._any_api(), 0, self._cid()),
                     False, "short-length")


# -- the client ------------------------------------------------------------------------------


class BrokerClosed(Exception):
    """The broker closed the connection (EOF or reset)."""


@dataclass
class FuzzStats:
    codes: Counter = field(default_factory=Counter)  # signed error code -> answers
    kinds: Counter = field(default_factory=Counter)  # mutation kind -> frames
    frames: int = 0
    connections: int = 0
    problems: list[str] = field(default_factory=list)


class FuzzClient:
    """Sends frames over one connection at a time, reopened whenever the broker closes it."""

    def __init__(self, address: tuple[str, int], timeout_s: float, stats: FuzzStats) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.stats = stats
        self._sock: socket.socket | None = None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connection(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.create_connection(self.address, timeout=self.timeout_s)
            self.stats.connections += 1
        return self._sock

    def throw(self, frame: Frame, index: int) -> None:
        self.stats.frames += frame.frames
        self.stats.kinds[frame.kind] += 1
        sock = self._connection()
        try:
            sock.sendall(frame.data)
        except (BrokenPipeError, ConnectionResetError):
            # The broker closed while we sent: only legitimate for frames it refuses unread.
            if frame.framed:
                self.stats.problems.append(f"frame {index} ({frame.kind}): send failed")
            self.close()
            return
        if frame.framed:
            self._expect_one_answer(frame, index)
        else:
            self._drain_until_closed(frame, index)

    def _expect_one_answer(self, frame: Frame, index: int) -> None:
        (correlation_id,) = struct.unpack_from(">I", frame.data, 8)
        try:
            answer_id, code = self._read_answer()
        except (BrokerClosed, TimeoutError) as exc:
            self.stats.problems.append(f"frame {index} ({frame.kind}) unanswered "
                                       f"({type(exc).__name__}): {frame.data[:48].hex()}")
            self.close()
            return
        self.stats.codes[code] += 1
        if answer_id != correlation_id:
            self.stats.problems.append(f"frame {index}: answer to {answer_id}, not "
                                       f"{correlation_id}")
        if code in CLOSING_CODES:
            self.close()

    def _drain_until_closed(self, frame: Frame, index: int) -> None:
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:  # ENOTCONN: the broker has reset the connection already
            self.close()
            return
        try:
            while self._count_answer():
                continue  # an out-of-step stream ends with the broker closing it
        except TimeoutError:
            self.stats.problems.append(f"frame {index} ({frame.kind}): broker neither answered "
                                       f"nor closed within {self.timeout_s} s")
        finally:
            self.close()

    def _count_answer(self) -> bool:
        """Read and count one answer; False when the broker closed instead."""
        try:
            _, code = self._read_answer()
        except BrokerClosed:
            return False
        self.stats.codes[code] += 1
        return True

    def _read_answer(self) -> tuple[int, int]:
        """(correlation id, signed error code) of the next answer; its body is read and
        dropped. BrokerClosed at EOF or reset."""
        head = self._recv_exactly(RESPONSE_HEADER.size)
        length, correlation_id, code = RESPONSE_HEADER.unpack(head)
        self._recv_exactly(length - (RESPONSE_HEADER.size - 4))
        return correlation_id, signed_code(code)

    def _recv_exactly(self, nbytes: int) -> bytes:
        buf = bytearray(nbytes)
        view = memoryview(buf)
        got = 0
        while got < nbytes:
            try:
                n = self._sock.recv_into(view[got:])
            except ConnectionResetError as exc:
                raise BrokerClosed() from exc
            if n == 0:
                raise BrokerClosed()
            got += n
        return bytes(buf)

"""Signed broker-to-broker frames: the stamp and MAC (keyed BLAKE3) every replication frame
carries.

A replication request (VOTE, REPLICA_FETCH, and whatever replaces them: every api in
`REPLICATION_APIS`) is its API body followed by a request trailer:

    body | u32 sender | u32 receiver | u64 incarnation | u64 counter | u64 sent_at_ms
         | cluster_id[32] | u64 data_incarnation | u8 learner | u16 group | tag[32]

    tag = BLAKE3-keyed(request key, "kaska-peer-request\\0" | u16 api | u16 version | body
                                     | the trailer before the tag)

`sender` is the signing broker's node id (the candidate or follower id inside the body must be
the same: a frame speaking for another broker is refused), `receiver` the broker it is meant
for (a frame recorded on its way to broker 2 cannot be played to broker 3), `incarnation` the
sender's start time in nanoseconds and `counter` a number it increments for every frame:
`common/replay_guard.py` refuses a counter seen before, and `sent_at_ms` (the sender's wall
clock) bounds what a receiver that just started can be fooled with. `group` is the replication
group the frame belongs to (docs/replication.md, "Leadership spread over the brokers": every
broker runs one Raft group per shard of partitions, each with its own journal, votes and
counter): signed, so a frame of one group can never be replayed into another.

`cluster_id` (docs/replication.md, "Membership and identity") is the sender's cluster id, ASCII
padded with NUL bytes to CLUSTER_ID_BYTES_MAX: a frame of another cluster is refused
(`ForeignClusterPeerFrameError`) even when the clusters share a secret. `data_incarnation` is
the sender's broker incarnation: random, made with its data directory
(services/broker/replication/identity.py), so a broker whose directory was emptied is recognised
as a new incarnation (its peers forget what they knew of its journal); `learner` is 1 while it
rejoins without a vote (docs/replication.md).

A successful answer (error code 0) is its API body (for REPLICA_FETCH: prefix and data section)
followed by an answer trailer:

    body | u32 responder | cluster_id[32] | u64 data_incarnation | tag[32]

    tag = BLAKE3-keyed(answer key, "kaska-peer-answer\\0" | u16 api | the request's stamp
                                   (sender, receiver, incarnation, counter, group) | body
                                   | u32 responder | cluster_id[32] | u64 data_incarnation)

so an answer is bound to the one request it answers: an old answer replayed, or one meant for
another request, does not verify. Error answers (a non-zero code) carry no trailer: nothing in
them is adopted, the requester only logs the refusal and tries again later.

The two keys are BLAKE3's `derive_key` of the cluster secret, one context string each, so a
request's tag can never pass for an answer's. Why BLAKE3 and not HMAC-SHA256: every replicated
byte is MACed once per follower by the leader and once by the follower (a fetch answer's data
section), and here HMAC-SHA256 cost 1.09 ms/MB against keyed BLAKE3's 0.30 ms/MB
(docs/benchmarks.md, "Replication's MAC"): most of a follower's CPU per byte. Keyed BLAKE3
is a MAC (a PRF under a 256-bit key), like HMAC-SHA256, and releases the GIL while it hashes.

Pure functions and frozen values; thread-safe. The secret is 1..SECRET_BYTES_MAX bytes
(common/cluster_secret.py loads it).
"""

from __future__ import annotations

import functools
import hmac
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import blake3

from common.kaska.errors import AuthenticationError

TAG_BYTES = 32
CLUSTER_ID_BYTES_MAX = 32
# sender, receiver, incarnation, counter, sent_at_ms, cluster_id, data_incarnation, learner,
# group
_REQUEST_STAMP = struct.Struct(f">IIQQQ{CLUSTER_ID_BYTES_MAX}sQBH")
_ANSWER_STAMP = struct.Struct(f">I{CLUSTER_ID_BYTES_MAX}sQ")  # responder, cluster_id, data_inc.
# the request's sender, receiver, incarnation, counter, group
_BINDING = struct.Struct(">IIQQH")
_API_VERSION = struct.Struct(">HH")
_API = struct.Struct(">H")
REQUEST_TRAILER_BYTES = _REQUEST_STAMP.size + TAG_BYTES
ANSWER_TRAILER_BYTES = _ANSWER_STAMP.size + TAG_BYTES
_REQUEST_DOMAIN = b"kaska-peer-request\0"
_ANSWER_DOMAIN = b"kaska-peer-answer\0"
_REQUEST_KEY_CONTEXT = "flights-optimizer kaska 2026-11-27 peer request MAC key"
_ANSWER_KEY_CONTEXT = "flights-optimizer kaska 2026-11-27 peer answer MAC key"
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
U16_MAX = 2**16 - 1


class PeerFrameError(AuthenticationError):
    """A replication frame refused before anything in it is used; `reason` is its metric label."""

    reason: str = "malformed"


class TruncatedPeerFrameError(PeerFrameError):
    """Too short to hold the trailer (an unsigned frame, or one cut short)."""

    reason = "truncated"


class ForgedPeerFrameError(PeerFrameError):
    """The MAC does not match: forged, altered, or signed with another secret."""

    reason = "unauthenticated"


class MalformedPeerFrameError(PeerFrameError):
    """Signed, but its body does not parse: a peer's bug, never applied."""

    reason = "malformed"


class MisdirectedPeerFrameError(PeerFrameError):
    """Signed for another receiver (or an answer from another responder)."""

    reason = "misdirected"


class UnknownPeerFrameSenderError(PeerFrameError):
    """Signed by a node id that is not a configured peer."""

    reason = "unknown_sender"


class ReplayedPeerFrameError(PeerFrameError):
    """A (sender, incarnation, counter) seen before, or older than the replay window."""

    reason = "replayed"


class StalePeerFrameError(PeerFrameError):
    """Stamped too far from the receiver's clock to be judged fresh."""

    reason = "stale"


class ForeignClusterPeerFrameError(PeerFrameError):
    """Signed, but by a broker of another cluster (its cluster id is not this broker's)."""

    reason = "cluster_mismatch"


class UnknownGroupPeerFrameError(PeerFrameError):
    """Signed for a replication group this broker does not run (another group count), or on a
    connection that already spoke for another group."""

    reason = "unknown_group"


class ImpostorPeerFrameError(PeerFrameError):
    """The body speaks for another broker than the one that signed it (or the connection)."""

    reason = "impostor"


class OutOfRangeFieldError(PeerFrameError):
    """A number from the wire outside the range it may take (replication_bounds.py)."""

    reason = "out_of_range"
    field: str = ""
    value: int = 0
    low: int = 0
    high: int = 0

    def __init__(self, field: str, value: int, low: int, high: int) -> None:
        super().__init__(f"{field} = {value} outside {low}..{high}")
        self.field, self.value, self.low, self.high = field, value, low, high


class UnencodableFrameError(PeerFrameError):
    """A frame this broker was about to send does not fit its wire format (a field too large):
    a bug or a value adopted before the bounds existed; refused here, never half sent."""

    reason = "unencodable"


@dataclass(frozen=True, slots=True)
class RequestStamp:
    """Who signed a request, for whom, and where it sits in the sender's sequence."""

    sender: int
    receiver: int
    incarnation: int
    counter: int
    sent_at_ms: int
    cluster_id: str = ""
    data_incarnation: int = 0  # the broker incarnation (its data directory's), not the process's
    learner: bool = False
    group: int = 0  # the replication group of the frame

    def __post_init__(self) -> None:
        assert 0 <= self.sender <= U32_MAX and 0 <= self.receiver <= U32_MAX
        assert 0 <= self.incarnation <= U64_MAX and 0 <= self.counter <= U64_MAX
        assert 0 <= self.sent_at_ms <= U64_MAX and 0 <= self.data_incarnation <= U64_MAX
        assert 0 <= self.group <= U16_MAX

    def binding(self) -> bytes:
        return _BINDING.pack(self.sender, self.receiver, self.incarnation, self.counter,
                             self.group)


@functools.lru_cache(maxsize=8)
def _mac_key(secret: bytes, context: str) -> bytes:
    return blake3.blake3(secret, derive_key_context=context).digest()


def _new_mac(secret: bytes, context: str, prefix: bytes) -> blake3.blake3:
    mac = blake3.blake3(key=_mac_key(secret, context))
    mac.update(prefix)
    return mac


def _request_mac(secret: bytes, api: int, version: int, body: Iterable, stamp: bytes) -> bytes:
    mac = _new_mac(secret, _REQUEST_KEY_CONTEXT,
                   _REQUEST_DOMAIN + _API_VERSION.pack(api, version))
    for part in body:
        mac.update(part)
    mac.update(stamp)
    return mac.digest()


def request_trailer(secret: bytes, api: int, version: int, body: Iterable,
                    stamp: RequestStamp) -> bytes:
    """The trailer to send after `body` (its parts, in order)."""
    packed = _REQUEST_STAMP.pack(stamp.sender, stamp.receiver, stamp.incarnation,
                                 stamp.counter, stamp.sent_at_ms,
                                 stamp.cluster_id.encode("ascii"), stamp.data_incarnation,
                                 1 if stamp.learner else 0, stamp.group)
    return packed + _request_mac(secret, api, version, body, packed)


def open_request(secret: bytes, api: int, version: int, frame) -> tuple[RequestStamp, memoryview]:
    """(stamp, body) of a signed request whose MAC holds; raises a `PeerFrameError`.
    Whether the stamp is fresh, meant for this broker and from a peer is the caller's
    business (services/broker/network/peer_gate.py)."""
    view = memoryview(frame)
    if len(view) < REQUEST_TRAILER_BYTES:
        raise TruncatedPeerFrameError(f"{len(view)} bytes cannot hold the {REQUEST_TRAILER_BYTES}"
                                      f"-byte signature trailer (an unsigned frame?)")
    body = view[:len(view) - REQUEST_TRAILER_BYTES]
    packed = view[len(body):len(view) - TAG_BYTES]
    tag = view[len(view) - TAG_BYTES:]
    if not hmac.compare_digest(bytes(tag), _request_mac(secret, api, version, (body,), packed)):
        raise ForgedPeerFrameError("the frame's MAC does not match")
    (sender, receiver, incarnation, counter, sent_at_ms, cluster_id, data_incarnation,
     learner, group) = _REQUEST_STAMP.unpack(packed)
    return RequestStamp(sender, receiver, incarnation, counter, sent_at_ms,
                        _cluster_id(cluster_id), data_incarnation, learner != 0, group), body


def _cluster_id(packed: bytes) -> str:
    """A cluster id from the wire; bytes that are not ASCII (never sent by a broker) come out
    escaped, so they compare unequal to every configured id and are refused as foreign."""
    return packed.rstrip(b"\0").decode("ascii", errors="backslashreplace")


def check_cluster(expected: str, got: str, what: str) -> None:
    if got != expected:
        raise ForeignClusterPeerFrameError(f"{what} of cluster {got!r}, this broker is of "
                                           f"cluster {expected!r}")


class AnswerMac:
    """The running MAC of one answer: fed the body in pieces (a fetch's data section comes
    from files), finished with the responder's id."""

    def __init__(self, secret: bytes, api: int, stamp: RequestStamp) -> None:
        self._mac = _new_mac(secret, _ANSWER_KEY_CONTEXT,
                             _ANSWER_DOMAIN + _API.pack(api) + stamp.binding())

    def update(self, part) -> None:
        self._mac.update(part)

    def trailer(self, responder: int, cluster_id: str = "", data_incarnation: int = 0) -> bytes:
        packed = _ANSWER_STAMP.pack(responder, cluster_id.encode("ascii"), data_incarnation)
        mac = self._mac.copy()
        mac.update(packed)
        return packed + mac.digest()

    def digest(self) -> bytes:
        return self._mac.digest()


def open_answer(secret: bytes, api: int, stamp: RequestStamp, responder: int,
                frame) -> memoryview:
    """The body of a signed answer to the request stamped `stamp`, from `responder` of the
    request's cluster; raises a `PeerFrameError` when it is truncated, forged, meant for
    another request, from another broker or of another cluster."""
    view = memoryview(frame)
    if len(view) < ANSWER_TRAILER_BYTES:
        raise TruncatedPeerFrameError(f"an answer of {len(view)} bytes cannot hold the "
                                      f"{ANSWER_TRAILER_BYTES}-byte signature trailer")
    body = view[:len(view) - ANSWER_TRAILER_BYTES]
    packed = view[len(body):len(view) - TAG_BYTES]
    tag = view[len(view) - TAG_BYTES:]
    signed_by, cluster_id, data_incarnation = _ANSWER_STAMP.unpack(packed)
    mac = AnswerMac(secret, api, stamp)
    mac.update(body)
    mac.update(packed)
    if not hmac.compare_digest(bytes(tag), mac.digest()):
        raise ForgedPeerFrameError("the answer's MAC does not match its request")
    if signed_by != responder:
        raise MisdirectedPeerFrameError(f"answer signed by node {signed_by}, asked {responder}")
    check_cluster(stamp.cluster_id, _cluster_id(cluster_id), f"answer of broker {signed_by}")
    return body

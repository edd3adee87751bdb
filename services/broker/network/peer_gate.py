"""The broker's door for replication frames: only its peers, signed, fresh and in range, get in.

Every VOTE and REPLICA_FETCH request passes `PeerGate.open_request` before the replication node
sees it (services/broker/replication/wire/peer_auth.py has the wire format). In order:

1. the MAC with the cluster's secret (a broker without a secret takes no peer frames),
2. addressed to this broker, signed by a configured peer of this broker's cluster (the
   stamp's cluster id, so a broker of another cluster sharing the secret is refused),
3. decoded, and every number in range (services/broker/replication/wire/replication_bounds.py),
4. of a replication group this broker runs (the stamp's `group`, below `groups`), and bound: the
   id the body claims (candidate, follower) is the signer's, and a connection that once spoke
   for a broker and a group speaks for no other (each group's follower keeps its own
   connections, so one group's long-poll never queues behind another's),
5. fresh: stamped within `frame_age_s_max` of this broker's clock, and not a replay
   (common/replay_guard.py, per sender and group: each group signs with its own counter).
   Checked last, so that a frame refused for another reason is not remembered as seen.

A refusal raises a `PeerFrameError` (the connection answers it as an authentication error),
is counted in `PeerRefusals` (metric `kaska_peer_frames_refused_total{direction,reason}`) and
logged once per peer (WARNING the first time, DEBUG after: a stranger hammering the port cannot
flood the log). Nothing of a refused frame reaches the state machine.

`seal` signs the answer, bound to the request it answers, data section included (read back
from the segment files the answer's slices point at: the page cache has them), with the data
incarnation of the request's group.

Thread-safety: any connection thread may call; the replay guard and the refusal counts each
sit behind a lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from common.kaska.errors import InvalidRequestError, InvalidResponseError
from common.kaska.protocol.frames import VERSION
from common.replay_guard import FRAME_AGE_S_MAX_DEFAULT, ReplayGuard, is_stale
from services.broker.replication.wire.peer_auth import (
    AnswerMac,
    ForgedPeerFrameError,
    ImpostorPeerFrameError,
    MalformedPeerFrameError,
    MisdirectedPeerFrameError,
    PeerFrameError,
    ReplayedPeerFrameError,
    RequestStamp,
    StalePeerFrameError,
    UnknownGroupPeerFrameError,
    UnknownPeerFrameSenderError,
    check_cluster,
    open_request,
)

log = logging.getLogger(__name__)

LOGGED_PEERS_MAX = 1024
HASH_CHUNK_BYTES = 1 << 20
# Direction labels: a peer's request refused by this broker; a peer's answer refused by this
# broker (replication/peer_link.py); a frame of this broker's own that could not be encoded.
REQUEST = "request"
ANSWER = "answer"
OUTGOING = "outgoing"

T = TypeVar("T")


class PeerRefusals:
    """Refused peer frames by (direction, reason), and who was already logged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._logged: set[str] = set()

    def refused(self, direction: str, error: PeerFrameError, peer: str) -> None:
        """Count one refusal; log it at WARNING the first time `peer` is refused."""
        with self._lock:
            self._counts[(direction, error.reason)] += 1
            first = peer not in self._logged and len(self._logged) < LOGGED_PEERS_MAX
            if first:
                self._logged.add(peer)
        level = logging.WARNING if first else logging.DEBUG
        log.log(level, "refused a peer %s from %s (%s): %s%s", direction, peer, error.reason,
                error, " (further refusals from it are counted, logged at DEBUG)" if first
                else "")

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class PeerSession:
    """What one TCP connection has shown of itself: its remote host, and the peer and group it
    spoke for (set by the first frame that got through the gate). Owned by the connection's
    thread. `answered`: the leader's last REPLICA_FETCH answer on it
    (replication/fetch_answers.py, FetchSession: the leader lease counts on it)."""

    __slots__ = ("origin", "node_id", "group", "answered")

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.node_id: int | None = None
        self.group: int | None = None
        self.answered: tuple[int, float] | None = None


@dataclass(frozen=True, slots=True)
class PeerRequest(Generic[T]):
    stamp: RequestStamp
    request: T
    api: int


class PeerGate:
    def __init__(self, node_id: int, peer_ids: Sequence[int], secret: bytes | None,
                 refusals: PeerRefusals | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 frame_age_s_max: float = FRAME_AGE_S_MAX_DEFAULT,
                 cluster_id: str = "", data_incarnations: Sequence[int] = (0,)) -> None:
        """`cluster_id`: the one every request must carry (and every answer is sealed with,
        with the `data_incarnations` of the request's group: replication/identity.py). This
        broker runs groups 0 .. len(data_incarnations) - 1."""
        assert data_incarnations, "a broker runs at least one replication group"
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.data_incarnations = tuple(data_incarnations)
        self.peer_ids = frozenset(peer_ids)
        self._secret = secret or None
        self.refusals = refusals or PeerRefusals()
        self._clock = clock
        self._wall_clock = wall_clock
        self.frame_age_s_max = frame_age_s_max
        self._guard = ReplayGuard()
        self._guard_lock = threading.Lock()

    def open_request(self, api: int, frame, session: PeerSession,
                     decode: Callable[[memoryview], T], check: Callable[[T], T],
                     claimed: Callable[[T], int]) -> PeerRequest[T]:
        """The verified, decoded and range-checked request; raises `PeerFrameError` (counted
        and logged) otherwise."""
        peer = f"host {session.origin}"
        try:
            stamp, body = self._verify(api, frame)
            peer = f"broker {stamp.sender} ({session.origin})"
            try:
                request = check(decode(body))
            except (InvalidRequestError, InvalidResponseError) as error:
                raise MalformedPeerFrameError(f"signed but unreadable: {error}") from error
            self._check_binding(session, stamp, claimed(request))
            # Last: a frame refused for any other reason leaves no mark in the replay window.
            self._admit(stamp)
        except PeerFrameError as error:
            self.refusals.refused(REQUEST, error, peer)
            raise
        session.node_id, session.group = stamp.sender, stamp.group
        return PeerRequest(stamp, request, api)

    def _verify(self, api: int, frame) -> tuple[RequestStamp, memoryview]:
        if self._secret is None:
            raise ForgedPeerFrameError("this broker has no cluster secret: it takes no peer "
                                       "frames")
        stamp, body = open_request(self._secret, api, VERSION, frame)
        if stamp.receiver != self.node_id:
            raise MisdirectedPeerFrameError(f"signed for broker {stamp.receiver}, this is "
                                            f"{self.node_id}")
        if stamp.sender not in self.peer_ids:
            raise UnknownPeerFrameSenderError(f"signed by broker {stamp.sender}, not a peer of "
                                              f"{self.node_id}")
        check_cluster(self.cluster_id, stamp.cluster_id, f"frame of broker {stamp.sender}")
        if stamp.group >= len(self.data_incarnations):
            raise UnknownGroupPeerFrameError(
                f"frame of broker {stamp.sender} for replication group {stamp.group}; this "
                f"broker runs groups 0..{len(self.data_incarnations) - 1} (brokers started "
                "with different --replication-groups?)")
        return stamp, body

    def _admit(self, stamp: RequestStamp) -> None:
        if is_stale(stamp.sent_at_ms, self._wall_clock(), self.frame_age_s_max):
            raise StalePeerFrameError(f"stamped {stamp.sent_at_ms} ms, over "
                                      f"{self.frame_age_s_max:g} s from this broker's clock")
        with self._guard_lock:
            fresh = self._guard.admit((stamp.sender, stamp.group), stamp.incarnation,
                                      stamp.counter, self._clock())
        if not fresh:
            raise ReplayedPeerFrameError(f"incarnation {stamp.incarnation} counter "
                                         f"{stamp.counter} already seen or too old")

    @staticmethod
    def _check_binding(session: PeerSession, stamp: RequestStamp, claimed_id: int) -> None:
        if claimed_id != stamp.sender:
            raise ImpostorPeerFrameError(f"signed by broker {stamp.sender}, speaks for "
                                         f"broker {claimed_id}")
        if session.node_id is not None and session.node_id != stamp.sender:
            raise ImpostorPeerFrameError(f"this connection speaks for broker "
                                         f"{session.node_id}, not {stamp.sender}")
        if session.group is not None and session.group != stamp.group:
            raise UnknownGroupPeerFrameError(f"this connection speaks for replication group "
                                             f"{session.group}, not {stamp.group}")

    def seal(self, peer_request: PeerRequest, body: bytes, slices: Sequence = ()) -> bytes:
        """The answer trailer over `body` and the bytes of `slices` (storage FileSlices)."""
        assert self._secret is not None, "only a request that passed the gate is answered"
        mac = AnswerMac(self._secret, peer_request.api, peer_request.stamp)
        mac.update(body)
        for piece in slices:
            position, left = piece.position, piece.nbytes
            while left:
                chunk = os.pread(piece.fd, min(left, HASH_CHUNK_BYTES), position)
                if not chunk:
                    break  # cut short under us: the send stops there too, the MAC will not hold
                mac.update(chunk)
                position += len(chunk)
                left -= len(chunk)
        return mac.trailer(self.node_id, self.cluster_id,
                           self.data_incarnations[peer_request.stamp.group])

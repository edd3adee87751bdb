"""The follower's and candidate's side of signed replication frames: one `PeerLink` per peer.

`PeerSigner` holds what every frame one replication group of this broker sends is signed with:
its node id, the cluster's secret, the group, its incarnation (start time in nanoseconds) and one
counter for all the group's frames (each receiver sees a rising subsequence, which its replay
window, kept per sender and group, accepts), and the group's identity: the cluster id, its
(data directory) incarnation and whether it is a learner, which the group's replication node sets
(`identify`) from replication/identity.py and its state machine.
`PeerLink` wraps the connection to one peer: it encodes a request, signs it for that peer
(wire/peer_auth.py) and checks the answer before anyone reads it -- signed by that peer, for
this very request, every number in range (wire/replication_bounds.py). A refused answer fails
the request's future with its `PeerFrameError` (the node logs and drops the connection, as for
a peer that went away), is counted in the shared `PeerRefusals` and logged once per peer.

A request that cannot be encoded (a field beyond its wire width) raises
`UnencodableFrameError`, a KaskaError, instead of `struct.error`: the replication loop counts
and survives it rather than dying with it.

Thread-safety: `PeerSigner.stamp` takes a lock; a `PeerLink` is used by the replication loop
(sends) and its connection's reader thread (answer checks, in the future's callback).
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from common.kaska.connection import BrokerConnection
from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.frames import VERSION, Api
from common.kaska.protocol.metadata import BrokerInfo
from services.broker.network.peer_gate import ANSWER, OUTGOING, PeerRefusals
from services.broker.replication.wire import PEER_RESPONSE_TYPES
from services.broker.replication.wire.peer_auth import (
    MalformedPeerFrameError,
    PeerFrameError,
    RequestStamp,
    UnencodableFrameError,
    open_answer,
    request_trailer,
)
from services.broker.replication.wire.replication_bounds import (
    check_fetch_response,
    check_snapshot_fetch_response,
    check_vote_response,
)

_ANSWER_CHECKS: dict[int, Callable] = {
    Api.VOTE: check_vote_response,
    Api.REPLICA_FETCH: check_fetch_response,
    Api.SNAPSHOT_FETCH: check_snapshot_fetch_response,
}


class PeerSigner:
    def __init__(self, node_id: int, secret: bytes, refusals: PeerRefusals | None = None,
                 incarnation: int | None = None,
                 wall_clock: Callable[[], float] = time.time, group: int = 0) -> None:
        assert secret, "a peer signer needs the cluster's secret"
        self.node_id = node_id
        self.group = group
        self.secret = secret
        self.refusals = refusals or PeerRefusals()
        self.incarnation = time.time_ns() if incarnation is None else incarnation
        self._wall_clock = wall_clock
        self._counter = 0
        self._lock = threading.Lock()
        self.cluster_id = ""
        self.data_incarnation = 0
        self.learner = False

    def identify(self, cluster_id: str, data_incarnation: int, learner: bool) -> None:
        with self._lock:
            self.cluster_id, self.data_incarnation, self.learner = \
                cluster_id, data_incarnation, learner

    def stamp(self, receiver: int) -> RequestStamp:
        with self._lock:
            self._counter += 1
            counter = self._counter
            cluster_id, data_incarnation, learner = \
                self.cluster_id, self.data_incarnation, self.learner
        return RequestStamp(self.node_id, receiver, self.incarnation, counter,
                            round(self._wall_clock() * 1000), cluster_id, data_incarnation,
                            learner, self.group)


class PeerLink:
    def __init__(self, signer: PeerSigner, peer: BrokerInfo, *, token: str | None,
                 connect_timeout_s: float, request_timeout_s: float) -> None:
        self._signer = signer
        self.peer = peer
        self._connection = BrokerConnection((peer.host, peer.port), token=token,
                                            connect_timeout_s=connect_timeout_s,
                                            request_timeout_s=request_timeout_s)

    @property
    def alive(self) -> bool:
        return self._connection.alive

    def close(self, reason: str) -> None:
        self._connection.close(reason)

    def send(self, request) -> Future:
        """Send `request` signed; the future resolves to (error code, body) with the answer's
        signature checked and removed, or fails with the `PeerFrameError` that refused it."""
        api = request.API
        try:
            body = request.encode()
        except struct.error as exc:
            error = UnencodableFrameError(f"{request!r} does not fit its wire format: {exc}")
            self._signer.refusals.refused(OUTGOING, error, f"broker {self._signer.node_id} "
                                          f"(itself, to {self.peer.node_id})")
            raise error from exc
        stamp = self._signer.stamp(self.peer.node_id)
        trailer = request_trailer(self._signer.secret, api, VERSION, (body,), stamp)
        sent = self._connection.send(api, [body, trailer])
        checked: Future = Future()
        sent.add_done_callback(lambda done: self._check_answer(done, checked, api, stamp))
        return checked

    def _check_answer(self, sent: Future, checked: Future, api: int,
                      stamp: RequestStamp) -> None:
        error = sent.exception()
        if error is not None:
            checked.set_exception(error)
            return
        code, frame = sent.result()
        if code:  # error answers carry no signature and nothing in them is adopted
            checked.set_result((code, frame))
            return
        try:
            body = open_answer(self._signer.secret, api, stamp, self.peer.node_id, frame)
            try:
                _ANSWER_CHECKS[api](PEER_RESPONSE_TYPES[api].decode(body))
            except InvalidResponseError as exc:
                raise MalformedPeerFrameError(f"signed but unreadable: {exc}") from exc
        except PeerFrameError as refused:
            self._signer.refusals.refused(ANSWER, refused, f"broker {self.peer.node_id} "
                                          f"({self.peer.host}:{self.peer.port})")
            checked.set_exception(refused)
            return
        checked.set_result((code, body))

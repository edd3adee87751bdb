"""PeerRequests: the replication node's requests to its peers, one `PeerLink` (peer_link.py) per
peer, made when first needed and dropped after any failure.

It owns the node's outgoing connections and the judgement of an answer: `result` gives the
decoded response, or None when the peer failed, refused, sent something unreadable or did not
answer in time -- and then the connection is dropped, so the next request goes on a new one.

Invariants: a connection that carried a failed or refused request is never used again. That is
what the leader lease counts on: a fetch on the connection that carried a leader's previous
answer tells the leader this follower read that answer (raft.holds_lease), so a follower that
abandons or fails to read an answer must not fetch on that connection again. No request or
result raises a KaskaError: unreachable peers are logged (debug) and answered with None.

Threads: the replication loop thread (votes, fetches, snapshot copies), and `close_all` once
that thread has ended (ReplicationNode.stop). A link's own reader thread completes the futures
(peer_link.py). `send_to_each` (a vote round) makes the links it lacks on short-lived connect
threads, one per peer: connecting to a frozen peer (the kernel accepts the connection, the
AUTHENTICATE answer never comes) takes the whole connect timeout, and made one after another
on the loop thread those waits delayed every other peer's vote. A connect thread
sends its one request on the new link and hands the link over under `_lock` (`_made`); the
loop thread adopts it on its next use, so a link is only ever used by one thread at a time.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from common.kaska.errors import BrokerUnavailableError, KaskaError
from services.broker.replication.config import PeerAddress, ReplicationConfig
from services.broker.replication.peer_link import PeerLink, PeerSigner

log = logging.getLogger(__name__)


class PeerRequests:
    def __init__(self, config: ReplicationConfig, peers: dict[int, PeerAddress],
                 signer: PeerSigner | None) -> None:
        self._config = config
        self._peers = peers
        self._signer = signer
        self.connections: dict[int, PeerLink] = {}
        self._lock = threading.Lock()  # guards the two below (connect threads write them)
        self._made: dict[int, PeerLink] = {}  # made by a connect thread, not adopted yet
        self._connecting: set[int] = set()  # a connect thread runs for these peers
        self._abandoned: set[int] = set()  # of those, dropped meanwhile: close, never adopt

    def send(self, peer: int, request) -> Future | None:
        try:
            return self._connection(peer).send(request)
        except KaskaError as exc:
            log.debug("broker %d: cannot reach peer %d: %s", self._config.node_id, peer, exc)
            self.drop(peer)
            return None

    def send_to_each(self, peers, request) -> dict[Future, int]:
        """`send` to every peer at once: on its live link, or on a link a connect thread
        makes (a frozen peer then delays only its own answer). A peer whose connect is still
        under way from an earlier round, or that cannot be reached, gets no request."""
        self._adopt_made()
        futures: dict[Future, int] = {}
        for peer in sorted(peers):
            link = self.connections.get(peer)
            if link is not None and link.alive:
                future = self.send(peer, request)
            else:
                if link is not None:  # dead: its reader saw the peer go
                    self.connections.pop(peer).close("dead")
                future = self._connect_then_send(peer, request)
            if future is not None:
                futures[future] = peer
        return futures

    def _connect_then_send(self, peer: int, request) -> Future | None:
        with self._lock:
            if peer in self._connecting:
                return None
            self._connecting.add(peer)
        answer: Future = Future()
        threading.Thread(target=self._connect_and_send, args=(peer, request, answer),
                         name=f"kaska-peer-connect-{peer}", daemon=True).start()
        return answer

    def _connect_and_send(self, peer: int, request, answer: Future) -> None:
        try:
            link = self._make_link(peer)
        except KaskaError as exc:
            log.debug("broker %d: cannot reach peer %d: %s", self._config.node_id, peer, exc)
            answer.set_exception(exc)
            self._connected(peer, None)
            return
        # Handed over before its request goes out: once the answer is in, the loop thread's
        # next request to this peer finds the link (a send is thread-safe, connection.py).
        if not self._connected(peer, link):
            link.close("its request was abandoned while it connected")
            answer.set_exception(BrokerUnavailableError(f"peer {peer}: request abandoned"))
            return
        try:
            sent = link.send(request)
        except KaskaError as exc:
            answer.set_exception(exc)
            return
        sent.add_done_callback(lambda done: _copy_outcome(done, answer))

    def _connected(self, peer: int, link: PeerLink | None) -> bool:
        """The connect thread's end: hand `link` over unless the peer was dropped meanwhile."""
        with self._lock:
            self._connecting.discard(peer)
            abandoned = peer in self._abandoned
            self._abandoned.discard(peer)
            if link is not None and not abandoned:
                self._made[peer] = link
            return not abandoned

    def _adopt_made(self) -> None:
        with self._lock:
            made, self._made = self._made, {}
        for peer, link in made.items():
            old = self.connections.get(peer)
            if old is not None and old is not link:
                old.close("replaced by a newer connection")
            self.connections[peer] = link

    def result(self, peer: int, future: Future, response_type, timeout_s: float = 0.0):
        """The decoded answer, or None when the peer failed, refused or did not answer."""
        node_id = self._config.node_id
        try:
            code, body = future.result(timeout=timeout_s or None) if timeout_s \
                else future.result(timeout=0)
        except TimeoutError:
            self.drop(peer)
            return None
        except KaskaError as exc:
            log.debug("broker %d: peer %d: %s", node_id, peer, exc)
            self.drop(peer)
            return None
        if code:
            log.info("broker %d: peer %d refused: error code %d", node_id, peer, code)
            # A new connection for the next request: a fetch on the old one would tell the
            # leader this follower read its answer (its lease counts on that).
            self.drop(peer)
            return None
        try:
            return response_type.decode(body)
        except KaskaError as exc:
            log.warning("broker %d: unreadable answer from peer %d: %s", node_id, peer, exc)
            self.drop(peer)
            return None

    def drop(self, peer: int) -> None:
        with self._lock:
            made = self._made.pop(peer, None)
            if peer in self._connecting:
                self._abandoned.add(peer)
        for connection in (self.connections.pop(peer, None), made):
            if connection is not None:
                connection.close("dropped after a failed replication request")

    def close_all(self, reason: str) -> None:
        self._adopt_made()
        for connection in self.connections.values():
            connection.close(reason)

    def _connection(self, peer: int) -> PeerLink:
        self._adopt_made()
        connection = self.connections.get(peer)
        if connection is not None and connection.alive:
            return connection
        connection = self._make_link(peer)
        self.connections[peer] = connection
        return connection

    def _make_link(self, peer: int) -> PeerLink:
        assert self._signer is not None, "a node with peers is built with a peer_signer"
        return PeerLink(self._signer, self._peers[peer], token=self._config.token,
                        connect_timeout_s=self._config.request_timeout_s,
                        request_timeout_s=self._config.request_timeout_s)


def _copy_outcome(done: Future, answer: Future) -> None:
    error = done.exception()
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(done.result())

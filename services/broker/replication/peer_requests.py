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

Threads: the replication loop thread only (votes, fetches, snapshot copies), and `close_all`
once that thread has ended (ReplicationNode.stop); no lock. A link's own reader thread
completes the futures (peer_link.py).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future

from common.kaska.errors import KaskaError
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

    def send(self, peer: int, request) -> Future | None:
        try:
            return self._connection(peer).send(request)
        except KaskaError as exc:
            log.debug("broker %d: cannot reach peer %d: %s", self._config.node_id, peer, exc)
            self.drop(peer)
            return None

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
        connection = self.connections.pop(peer, None)
        if connection is not None:
            connection.close("dropped after a failed replication request")

    def close_all(self, reason: str) -> None:
        for connection in self.connections.values():
            connection.close(reason)

    def _connection(self, peer: int) -> PeerLink:
        connection = self.connections.get(peer)
        if connection is not None and connection.alive:
            return connection
        assert self._signer is not None, "a node with peers is built with a peer_signer"
        connection = PeerLink(self._signer, self._peers[peer], token=self._config.token,
                              connect_timeout_s=self._config.request_timeout_s,
                              request_timeout_s=self._config.request_timeout_s)
        self.connections[peer] = connection
        return connection

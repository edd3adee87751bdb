"""What a handler answers: a small body in memory plus, for FETCH, file slices that the
connection sends with `os.sendfile` after it (and, for a peer, the signature trailer); or a
`DeferredReply` that is only ready later (a produce waiting for its acks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reply:
    body: bytes = b""
    slices: Sequence = ()  # storage FileSlice(fd, position, nbytes), sent after `body`
    records: int = 0  # records in the batches of `slices` (metrics: records out)
    trailer: bytes = b""  # sent after the slices: a peer answer's signature (peer_gate.py)

    @property
    def nbytes(self) -> int:
        return len(self.body) + sum(piece.nbytes for piece in self.slices) + len(self.trailer)


@dataclass(frozen=True, slots=True)
class DeferredReply:
    """A reply that is ready once `wait()` returns it (or raises the KaskaError to answer).

    The connection reads the client's next request meanwhile and sends this answer when it is
    ready, so a producer that pipelines requests keeps the leader appending while earlier
    batches replicate. Answers may then leave out of order: clients match them by correlation
    id. `wait()` must be bounded (the replica manager's ack timeout)."""

    wait: Callable[[], Reply]

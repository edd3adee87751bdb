"""What a handler answers: a small body in memory plus, for FETCH, file slices that the
connection sends with `os.sendfile` after it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reply:
    body: bytes = b""
    slices: Sequence = ()  # storage FileSlice(fd, position, nbytes), sent after `body`

    @property
    def nbytes(self) -> int:
        return len(self.body) + sum(piece.nbytes for piece in self.slices)

"""AUTHENTICATE: the shared token, as the first request of a connection when the broker has
one.  Request: u16-prefixed token bytes.  Response: empty."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api


@dataclass(frozen=True, slots=True)
class AuthenticateRequest:
    API: ClassVar[Api] = Api.AUTHENTICATE
    token: bytes

    def encode(self) -> bytes:
        return BodyWriter().short_bytes(self.token).getvalue()

    @classmethod
    def decode(cls, buf) -> AuthenticateRequest:
        reader = BodyReader(buf)
        request = cls(reader.short_bytes("token"))
        reader.finish()
        return request

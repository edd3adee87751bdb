"""Bounded big-endian readers and writers for Kaska message bodies.

Every body on the wire is a sequence of fixed-width integers, u16-length-prefixed UTF-8
strings, u16-length-prefixed byte strings and u32-counted arrays. `BodyReader` checks each
length against the bytes actually left before it slices or allocates, so decoding never
allocates more than the frame it reads from; any shortfall, leftover byte or invalid UTF-8
raises the reader's error class (InvalidRequestError on the broker, InvalidResponseError on
the client). Readers and writers are not thread-safe; each lives inside one call.
"""

from __future__ import annotations

import struct

from common.kaska.errors import InvalidRequestError, KaskaError

STRING_BYTES_MAX = 0xFFFF

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BodyReader:
    """Reads one body front to back; `finish()` insists nothing is left over."""

    __slots__ = ("_view", "_pos", "_error")

    def __init__(self, buf, error: type[KaskaError] = InvalidRequestError) -> None:
        self._view = memoryview(buf)
        self._pos = 0
        self._error = error

    @property
    def remaining(self) -> int:
        return len(self._view) - self._pos

    def _fixed(self, fmt: struct.Struct, what: str):
        if self.remaining < fmt.size:
            raise self._error(f"body ends inside {what}")
        (value,) = fmt.unpack_from(self._view, self._pos)
        self._pos += fmt.size
        return value

    def u8(self, what: str = "u8") -> int:
        return self._fixed(_U8, what)

    def u16(self, what: str = "u16") -> int:
        return self._fixed(_U16, what)

    def i16(self, what: str = "i16") -> int:
        return self._fixed(_I16, what)

    def u32(self, what: str = "u32") -> int:
        return self._fixed(_U32, what)

    def i32(self, what: str = "i32") -> int:
        return self._fixed(_I32, what)

    def i64(self, what: str = "i64") -> int:
        return self._fixed(_I64, what)

    def flag(self, what: str = "flag") -> bool:
        value = self.u8(what)
        if value > 1:
            raise self._error(f"{what} is {value}, not 0 or 1")
        return value == 1

    def raw(self, nbytes: int, what: str = "bytes") -> memoryview:
        """A zero-copy view of the next nbytes."""
        if nbytes < 0 or nbytes > self.remaining:
            raise self._error(f"body ends inside {what} ({nbytes} bytes announced)")
        view = self._view[self._pos:self._pos + nbytes]
        self._pos += nbytes
        return view

    def short_bytes(self, what: str = "bytes") -> bytes:
        return bytes(self.raw(self.u16(what), what))

    def string(self, what: str = "string") -> str:
        view = self.raw(self.u16(what), what)
        try:
            return str(view, "utf-8")
        except UnicodeDecodeError as exc:
            raise self._error(f"{what} is not UTF-8") from exc

    def count(self, element_bytes_min: int, what: str = "array") -> int:
        """An array length, refused when even the smallest elements could not fit."""
        assert element_bytes_min >= 1
        n = self.u32(what)
        if n * element_bytes_min > self.remaining:
            raise self._error(f"{what} announces {n} elements, the body cannot hold them")
        return n

    def rest(self) -> memoryview:
        return self.raw(self.remaining, "rest")

    def finish(self) -> None:
        if self.remaining:
            raise self._error(f"{self.remaining} unexpected bytes after the body")


class BodyWriter:
    """Builds one body; `getvalue()` returns the bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def u8(self, value: int) -> BodyWriter:
        self._buf += _U8.pack(value)
        return self

    def u16(self, value: int) -> BodyWriter:
        self._buf += _U16.pack(value)
        return self

    def i16(self, value: int) -> BodyWriter:
        self._buf += _I16.pack(value)
        return self

    def u32(self, value: int) -> BodyWriter:
        self._buf += _U32.pack(value)
        return self

    def i32(self, value: int) -> BodyWriter:
        self._buf += _I32.pack(value)
        return self

    def i64(self, value: int) -> BodyWriter:
        self._buf += _I64.pack(value)
        return self

    def flag(self, value: bool) -> BodyWriter:
        return self.u8(1 if value else 0)

    def short_bytes(self, value: bytes) -> BodyWriter:
        if len(value) > STRING_BYTES_MAX:
            raise ValueError(f"{len(value)} bytes do not fit a u16 length")
        self._buf += _U16.pack(len(value))
        self._buf += value
        return self

    def string(self, value: str) -> BodyWriter:
        return self.short_bytes(value.encode("utf-8"))

    def raw(self, value: bytes) -> BodyWriter:
        self._buf += value
        return self

    def getvalue(self) -> bytes:
        return bytes(self._buf)

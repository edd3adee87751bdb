"""Kafka's request and response frames.

    request:  i32 size | i16 api_key | i16 api_version | i32 correlation_id | client_id
              (i16-length nullable string) | [tagged fields, flexible versions] | body
    response: i32 size | i32 correlation_id | [tagged fields, flexible versions] | body

`size` counts the bytes after itself. ApiVersions answers always use the non-flexible response
header (KIP-511), whatever version they are. The fixed 8 bytes after `size` are read first so
that even a request this listener cannot decode further (unknown api, unsupported version,
garbage after them) is answered with its correlation id.

Pure; thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from services.broker.kafka.errors import MalformedRequestError

FRAME_SIZE = struct.Struct(">i")
FIXED_HEADER = struct.Struct(">hhi")
FRAME_SIZE_BYTES = FRAME_SIZE.size
FIXED_HEADER_BYTES = FIXED_HEADER.size
_CORRELATION = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
EMPTY_TAGGED_FIELDS = b"\x00"


@dataclass(frozen=True, slots=True)
class FixedHeader:
    api_key: int
    api_version: int
    correlation_id: int


def parse_fixed_header(frame) -> FixedHeader:
    """The first 8 bytes of a request frame (after its size)."""
    if len(frame) < FIXED_HEADER_BYTES:
        raise MalformedRequestError(f"a request of {len(frame)} bytes has no header")
    return FixedHeader(*FIXED_HEADER.unpack_from(frame))


def frame_size(raw: bytes) -> int:
    (size,) = FRAME_SIZE.unpack(raw)
    return size


def encode_response(correlation_id: int, body: bytes, flexible_header: bool) -> bytes:
    head = _CORRELATION.pack(correlation_id)
    if flexible_header:
        head += EMPTY_TAGGED_FIELDS
    return FRAME_SIZE.pack(len(head) + len(body)) + head + body


def encode_error_only(correlation_id: int, error_code: int) -> bytes:
    """The answer to a request this listener cannot decode into its own schema: the response
    header and a lone error code, the first field of ApiVersions' (and many other) answers.
    A client gets an error instead of a silent drop; the connection stays in step."""
    return encode_response(correlation_id, _ERROR_CODE.pack(error_code), flexible_header=False)

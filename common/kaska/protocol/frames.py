"""Frame headers, the API numbers and the error body shared by every Kaska API.

Requests:  u32 length | u16 api | u16 version | u32 correlation id | body
Responses: u32 length | u32 correlation id | u16 error code | body
Big-endian; `length` counts the bytes after the length field. A response with a non-zero
error code carries an `ErrorBody` instead of the API's body. Pure and thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from common.kaska.errors import InvalidRequestError, InvalidResponseError, KaskaError
from common.kaska.protocol.codec import BodyReader, BodyWriter


class Api(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    CREATE_TOPIC = 4
    DELETE_TOPIC = 5
    LIST_TOPICS = 6
    MESSAGE_LENGTH = 7
    COMMIT_OFFSET = 8
    FETCH_COMMITTED = 9
    AUTHENTICATE = 10
    DELETE_RECORDS = 11
    # Broker to broker (docs/replication.md).
    VOTE = 32
    REPLICA_FETCH = 33
    SNAPSHOT_FETCH = 34


# Api numbers 32..47 belong to broker-to-broker replication and every client API stays below
# them, so adding either kind never renumbers the other.
REPLICATION_APIS_RESERVED = range(32, 48)
REPLICATION_APIS = frozenset({Api.VOTE, Api.REPLICA_FETCH, Api.SNAPSHOT_FETCH})
assert {api for api in Api if api in REPLICATION_APIS_RESERVED} == REPLICATION_APIS
assert all(api < REPLICATION_APIS_RESERVED.start for api in Api if api not in REPLICATION_APIS)

# Every API has version 0; the topic APIs (and DELETE_RECORDS) also 1 (their modules); others:
# UnsupportedVersion.
VERSION = 0

REQUEST_HEADER = struct.Struct(">IHHI")
RESPONSE_HEADER = struct.Struct(">IIH")
LENGTH_FIELD_BYTES = 4
REQUEST_HEADER_AFTER_LENGTH = REQUEST_HEADER.size - LENGTH_FIELD_BYTES
RESPONSE_HEADER_AFTER_LENGTH = RESPONSE_HEADER.size - LENGTH_FIELD_BYTES
FRAME_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
CORRELATION_ID_MODULUS = 1 << 32


@dataclass(frozen=True, slots=True)
class RequestHeader:
    length: int
    api: int
    version: int
    correlation_id: int

    @property
    def body_bytes(self) -> int:
        return self.length - REQUEST_HEADER_AFTER_LENGTH


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    length: int
    correlation_id: int
    error_code: int

    @property
    def body_bytes(self) -> int:
        return self.length - RESPONSE_HEADER_AFTER_LENGTH


def decode_request_header(buf) -> RequestHeader:
    """The 12-byte request header; a length too small to hold it is InvalidRequestError."""
    header = RequestHeader(*REQUEST_HEADER.unpack_from(buf))
    if header.length < REQUEST_HEADER_AFTER_LENGTH:
        raise InvalidRequestError(f"frame length {header.length} below the request header")
    return header


def decode_response_header(buf) -> ResponseHeader:
    header = ResponseHeader(*RESPONSE_HEADER.unpack_from(buf))
    if header.length < RESPONSE_HEADER_AFTER_LENGTH:
        raise InvalidResponseError(f"frame length {header.length} below the response header")
    return header


def encode_request_header(api: int, correlation_id: int, body_bytes: int,
                          version: int = VERSION) -> bytes:
    return REQUEST_HEADER.pack(REQUEST_HEADER_AFTER_LENGTH + body_bytes, api, version,
                               correlation_id)


def encode_request(api: int, correlation_id: int, body: bytes, version: int = VERSION) -> bytes:
    return encode_request_header(api, correlation_id, len(body), version) + body


def encode_response_header(correlation_id: int, error_code: int, body_bytes: int) -> bytes:
    return RESPONSE_HEADER.pack(RESPONSE_HEADER_AFTER_LENGTH + body_bytes, correlation_id,
                                error_code)


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """Why a request failed; `leader` ("host:port" or "") points a NOT_LEADER answer onwards."""

    message: str
    leader: str = ""

    def encode(self) -> bytes:
        return BodyWriter().string(self.message[:1000]).string(self.leader).getvalue()

    @classmethod
    def decode(cls, buf) -> ErrorBody:
        reader = BodyReader(buf, InvalidResponseError)
        body = cls(reader.string("message"), reader.string("leader"))
        reader.finish()
        return body

    @classmethod
    def from_error(cls, error: KaskaError) -> ErrorBody:
        return cls(str(error) or type(error).__name__, error.leader or "")


@dataclass(frozen=True, slots=True)
class EmptyResponse:
    """The body of a successful answer that carries nothing (create, delete, commit, auth)."""

    def encode(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, buf) -> EmptyResponse:
        BodyReader(buf, InvalidResponseError).finish()
        return cls()

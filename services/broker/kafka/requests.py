"""One request frame in, one answer frame (or none) out: the part of a Kafka connection that
needs no socket, so that it is tested frame by frame.

Order of checks: the fixed header (api key, version, correlation id); the api and version
against api_versions.SUPPORTED (an ApiVersions request of a newer version gets the KIP-511 v0
answer, anything else unsupported a lone UNSUPPORTED_VERSION); the header and body against
the api's schema (garbage: a lone INVALID_REQUEST); then the handler. A handler's bug costs
its request (UNKNOWN_SERVER_ERROR, logged), never the connection or the broker. A handler may
answer later (DeferredResponse: a Produce waiting for acks): its frame is then a Deferred
(answers.py) that the connection's answer thread waits for, in request order. Every request
is counted once it is answered, by api and outcome (`kaska_kafka_requests_total`): ok, the
lone error of a refused frame (unsupported_version, invalid_request), a handler's refusal (its
KaskaError's class; also when it refused only part of the request, answers.PartlyRefused: a
Produce partition whose records were corrupt, too large or unsupported) or internal_error.

Thread-safe (no state of its own).
"""

from __future__ import annotations

import logging
import struct
import time

from common.kaska.errors import KaskaError
from services.broker.kafka import api_versions
from services.broker.kafka.answers import Deferred, DeferredResponse, PartlyRefused
from services.broker.kafka.context import REQUEST_PEER, KafkaContext
from services.broker.kafka.dispatch import API_SPECS
from services.broker.kafka.errors import (
    INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_VERSION,
    kafka_code,
)
from services.broker.kafka.framing import (
    FixedHeader,
    encode_error_only,
    encode_response,
    parse_fixed_header,
)

log = logging.getLogger(__name__)

# What kafka-python's schema decoders raise on bytes that are not the request they expect.
DECODE_ERRORS = (struct.error, ValueError, IndexError, UnicodeDecodeError, EOFError,
                 OverflowError, TypeError, KeyError, MemoryError)


def answer(kctx: KafkaContext, frame: bytes, peer: str = "") -> bytes | Deferred | None:
    """The whole response frame (size included) for one request frame (size excluded), or a
    Deferred that returns it once ready (a Produce waiting for its acks), or None (acks=0)."""
    # Timed from here to the answer ready (a Produce's acks included): each `_count` observes
    # kaska_request_duration_seconds{listener="kafka"} (request_durations.py).
    started_s = time.perf_counter()
    fixed = parse_fixed_header(frame)
    log.debug("kafka api %d v%d from %s", fixed.api_key, fixed.api_version, peer)
    spec = API_SPECS.get(fixed.api_key)
    if not api_versions.supports(fixed.api_key, fixed.api_version):
        log.info("kafka request from %s: api %d version %d not supported", peer, fixed.api_key,
                 fixed.api_version)
        _count(kctx, fixed, started_s, "unsupported_version")
        if fixed.api_key == api_versions.API_VERSIONS:
            return encode_response(fixed.correlation_id, api_versions.unsupported_answer(),
                                   flexible_header=False)
        return encode_error_only(fixed.correlation_id, UNSUPPORTED_VERSION)
    try:
        request = spec.request_class.decode(frame, version=fixed.api_version, header=True)
    except DECODE_ERRORS as exc:
        log.info("kafka request from %s: api %d v%d does not parse: %r", peer, fixed.api_key,
                 fixed.api_version, exc)
        _count(kctx, fixed, started_s, "invalid_request")
        return encode_error_only(fixed.correlation_id, INVALID_REQUEST)
    return _handle(kctx, spec, request, fixed, peer, started_s)


def _count(kctx: KafkaContext, fixed: FixedHeader, started_s: float, outcome: str) -> None:
    spec = API_SPECS.get(fixed.api_key)
    api = spec.request_class.__name__.removesuffix("Request") if spec else "unknown"
    kctx.broker.metrics.kafka_answered(api, outcome, time.perf_counter() - started_s)


def _handle(kctx: KafkaContext, spec, request, fixed: FixedHeader,
            peer: str, started_s: float) -> bytes | Deferred | None:
    token = REQUEST_PEER.set(peer)
    try:
        response = spec.handle(kctx, request)
    except KaskaError as error:
        log.info("kafka api %d from %s refused: %s", fixed.api_key, peer, error)
        _count(kctx, fixed, started_s, type(error).__name__)
        return encode_error_only(fixed.correlation_id, kafka_code(error))
    except Exception:
        # A handler bug: this request gets an error, the connection lives on.
        log.exception("kafka api %d v%d from %s failed", fixed.api_key, fixed.api_version, peer)
        _count(kctx, fixed, started_s, "internal_error")
        return encode_error_only(fixed.correlation_id, UNKNOWN_SERVER_ERROR)
    finally:
        REQUEST_PEER.reset(token)
    if isinstance(response, DeferredResponse):
        return Deferred(lambda: _encode(kctx, spec, response.wait, fixed, peer, started_s))
    return _encode(kctx, spec, lambda: response, fixed, peer, started_s)


def _encode(kctx: KafkaContext, spec, response_of, fixed: FixedHeader,
            peer: str, started_s: float) -> bytes | None:
    """The answer frame of `response_of()` (which may wait, and may raise like a handler)."""
    try:
        response = response_of()
        outcome = "ok"
        if isinstance(response, PartlyRefused):
            response, outcome = response.response, response.outcome
        body = None if response is None else response.encode(version=fixed.api_version)
    except KaskaError as error:
        log.info("kafka api %d from %s refused: %s", fixed.api_key, peer, error)
        _count(kctx, fixed, started_s, type(error).__name__)
        return encode_error_only(fixed.correlation_id, kafka_code(error))
    except Exception:
        log.exception("kafka api %d v%d from %s failed", fixed.api_key, fixed.api_version, peer)
        _count(kctx, fixed, started_s, "internal_error")
        return encode_error_only(fixed.correlation_id, UNKNOWN_SERVER_ERROR)
    _count(kctx, fixed, started_s, outcome)
    if body is None:
        return None  # acks=0: no answer
    flexible = (spec.request_class.flexible_version_q(fixed.api_version)
                and fixed.api_key != api_versions.API_VERSIONS)
    return encode_response(fixed.correlation_id, bytes(body), flexible_header=flexible)

"""Bounded decompression of Kafka's codecs (common/kaska/kafka_compression.py), against what the
clients' own libraries write: kafka-python's encoders (xerial-framed snappy, as Java's
producer writes it; LZ4 frames; zstd; gzip) and raw snappy (as librdkafka writes it)."""

import struct
from concurrent.futures import ThreadPoolExecutor

import cramjam
import pytest
from kafka import codec as kafka_codec

from common.kaska.errors import CorruptBatchError, MessageTooLargeError
from common.kaska.kafka_compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    WINDOW_KEPT_BYTES,
    InflatedTooLargeError,
    inflate,
)
from common.kaska.record_batch import iter_records, stamp
from services.broker.kafka.records import kafka_to_kaska
from tests.unit.broker.kafka.kafka_batches import kafka_batch

DATA = b"".join(b"record %06d of a compressible batch; " % i for i in range(3000))
ENCODERS = {
    "gzip": (CODEC_GZIP, kafka_codec.gzip_encode),
    "snappy-xerial": (CODEC_SNAPPY, kafka_codec.snappy_encode),
    "snappy-raw": (CODEC_SNAPPY, lambda data: bytes(cramjam.snappy.compress_raw(data))),
    "lz4": (CODEC_LZ4, kafka_codec.lz4_encode),
    "zstd": (CODEC_ZSTD, kafka_codec.zstd_encode),
}


def encoded(name: str, data: bytes = DATA) -> tuple[int, bytes]:
    codec, encode = ENCODERS[name]
    return codec, bytes(encode(data))


@pytest.mark.parametrize("name", ENCODERS)
def test_each_codec_inflates_what_the_clients_libraries_write(name):
    codec, compressed = encoded(name)
    assert len(compressed) < len(DATA) / 3  # the scenario: really compressed
    assert inflate(codec, compressed, len(DATA)) == DATA
    assert inflate(codec, memoryview(compressed), len(DATA) + 1) == DATA


@pytest.mark.parametrize("name", ENCODERS)
def test_inflating_one_byte_past_the_bound_is_refused(name):
    codec, compressed = encoded(name)
    with pytest.raises(InflatedTooLargeError, match="inflate past"):
        inflate(codec, compressed, len(DATA) - 1)
    assert issubclass(InflatedTooLargeError, MessageTooLargeError)  # MESSAGE_TOO_LARGE


@pytest.mark.parametrize("name", ENCODERS)
def test_a_bomb_stops_at_the_bound(name):
    # 64 MiB of zeros in at most 3 MiB (snappy: ~21:1; zstd: a few KB): refused after 1 MiB.
    codec, bomb = encoded(name, bytes(64 << 20))
    assert len(bomb) < (64 << 20) // 20
    with pytest.raises(InflatedTooLargeError):
        inflate(codec, bomb, 1 << 20)


@pytest.mark.parametrize("name", ENCODERS)
def test_garbage_is_corrupt(name):
    codec, compressed = encoded(name)
    garbage = compressed[:16] + b"\xff" * (len(compressed) - 16)
    with pytest.raises(CorruptBatchError, match="do not inflate|xerial"):
        inflate(codec, garbage, len(DATA))


@pytest.mark.parametrize("name", ["gzip", "snappy-xerial", "snappy-raw", "lz4", "zstd"])
def test_truncated_stream_is_corrupt(name):
    codec, compressed = encoded(name)
    with pytest.raises(CorruptBatchError):
        inflate(codec, compressed[: len(compressed) // 2], len(DATA))


def test_raw_snappy_claiming_past_the_bound_is_refused_before_inflating():
    # The 5-byte preamble claims 4 GiB - 1; nothing follows.
    claim = b"\xff\xff\xff\xff\x0f"
    assert cramjam.snappy.decompress_raw_len(claim) == 2**32 - 1
    with pytest.raises(InflatedTooLargeError):
        inflate(CODEC_SNAPPY, claim, 1 << 20)


def test_xerial_block_running_past_the_records_is_corrupt():
    _codec, compressed = encoded("snappy-xerial")
    block = bytearray(compressed)
    struct.pack_into(">i", block, 16, len(compressed))  # the first block's length
    with pytest.raises(CorruptBatchError, match="xerial snappy block"):
        inflate(CODEC_SNAPPY, bytes(block), len(DATA))
    with pytest.raises(CorruptBatchError, match="cut short"):
        inflate(CODEC_SNAPPY, compressed[:18], len(DATA))


def test_xerial_blocks_share_one_bound():
    # Each 32 KiB block is well under the bound; together they are not.
    codec, compressed = encoded("snappy-xerial")
    assert len(DATA) > 3 * 32 * 1024  # kafka-python cuts xerial blocks of 32 KiB
    with pytest.raises(InflatedTooLargeError):
        inflate(codec, compressed, 40 * 1024)


def test_unknown_codec_is_corrupt():
    with pytest.raises(CorruptBatchError, match="unknown compression codec 5"):
        inflate(5, b"abc", 100)


def test_a_kaska_reader_inflates_within_its_own_bound():
    kaska = bytearray(kafka_to_kaska(kafka_batch([(None, bytes(5000), [])] * 4, compression=4)))
    stamp(kaska, 10, 1)
    assert list(iter_records(kaska)) == [(10 + i, bytes(5000)) for i in range(4)]
    with pytest.raises(InflatedTooLargeError):
        list(iter_records(kaska, inflated_bytes_max=10_000))


def test_a_thread_reuses_its_window_without_leaking_an_earlier_batch():
    codec, large = encoded("lz4", bytes(WINDOW_KEPT_BYTES + 4096))
    _codec, small = encoded("lz4", b"small")
    assert inflate(codec, large, 64 << 20) == bytes(WINDOW_KEPT_BYTES + 4096)
    assert inflate(codec, small, 64 << 20) == b"small"
    with pytest.raises(CorruptBatchError):
        inflate(codec, small[:-3], 64 << 20)
    assert inflate(codec, small, 64 << 20) == b"small"


def test_threads_inflate_side_by_side():
    payloads = {name: encoded(name, DATA + name.encode()) for name in ENCODERS}

    def inflate_each(name: str) -> bool:
        codec, compressed = payloads[name]
        return all(inflate(codec, compressed, 1 << 20) == DATA + name.encode() for _ in range(20))

    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        assert all(pool.map(inflate_each, payloads))

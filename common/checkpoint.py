"""The shared checkpoint store: atomic, versioned, checksummed snapshots in one directory.

Used by the health checkers (restart counts, back-off), the client (resume point) and the query
service (progress). One store = one directory + one name; it keeps up to three files:

    <name>.tmp       a save in progress (never read by `load`)
    <name>.current   the newest completed save
    <name>.old       the save before it

A save writes TMP and fsyncs it, renames CURRENT to OLD, renames TMP to CURRENT, then fsyncs the
directory. A crash at any point leaves at least one of CURRENT/OLD whole, so `load` returns the
newest *valid* one (highest version whose checksum holds) and a torn or corrupt CURRENT falls back
to OLD. A save that crashed before its last rename is lost, which is fine: it never returned.

File format (big-endian), `HEADER_BYTES` = 28:

    offset size field
    0      4    magic           b"FOCP"
    4      2    format_version  u16  FORMAT_VERSION
    6      2    reserved        u16  0
    8      8    version         u64  1 for the first save of a store, +1 per save
    16     8    payload_length  u64  <= payload_bytes_max
    24     4    crc32c          u32  CRC32C of bytes [4, 24) followed by the payload
    28     ...  payload

Invariants: versions on disk only grow; CURRENT, when valid, holds the highest version written.
Thread-safety: one `CheckpointStore` may be shared by threads (a lock serialises save and load);
two processes must never write the same directory + name.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

MAGIC = b"FOCP"
FORMAT_VERSION = 1
HEADER_BYTES = 28
PAYLOAD_BYTES_MAX_DEFAULT = 64 * 1024 * 1024

_HEADER = struct.Struct(">4sHHQQI")
assert _HEADER.size == HEADER_BYTES
_CRC_COVERED_HEADER = slice(4, 24)


class CheckpointError(Exception):
    """Base of the checkpoint store's errors."""


class CorruptCheckpointError(CheckpointError):
    """One checkpoint file whose magic, length, version or checksum does not hold."""


class NoValidCheckpointError(CheckpointError):
    """Checkpoint files exist but neither CURRENT nor OLD is valid: the state is lost."""


class CheckpointTooLargeError(CheckpointError):
    """A payload above the store's `payload_bytes_max`."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    version: int
    payload: bytes

    def json(self) -> Any:
        return json.loads(self.payload.decode("utf-8"))


def encode_checkpoint(version: int, payload: bytes) -> bytes:
    header = bytearray(_HEADER.pack(MAGIC, FORMAT_VERSION, 0, version, len(payload), 0))
    crc = crc32c.crc32c(payload, crc32c.crc32c(bytes(header[_CRC_COVERED_HEADER])))
    struct.pack_into(">I", header, 24, crc)
    return bytes(header) + payload


def decode_checkpoint(
    data: bytes, payload_bytes_max: int = PAYLOAD_BYTES_MAX_DEFAULT
) -> Checkpoint:
    """Parse and verify one checkpoint file's bytes; raises `CorruptCheckpointError`."""
    if len(data) < HEADER_BYTES:
        raise CorruptCheckpointError(f"{len(data)} bytes, shorter than the {HEADER_BYTES}-B header")
    magic, format_version, _reserved, version, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpointError(f"bad magic {magic!r}")
    if format_version != FORMAT_VERSION:
        raise CorruptCheckpointError(f"unknown format version {format_version}")
    if length > payload_bytes_max or HEADER_BYTES + length != len(data):
        raise CorruptCheckpointError(f"payload length {length} does not match {len(data)} bytes")
    payload = data[HEADER_BYTES:]
    expected = crc32c.crc32c(payload, crc32c.crc32c(data[_CRC_COVERED_HEADER]))
    if crc != expected:
        raise CorruptCheckpointError(f"crc32c {crc:#010x} != computed {expected:#010x}")
    if version < 1:
        raise CorruptCheckpointError(f"version {version} below 1")
    return Checkpoint(version=version, payload=bytes(payload))


class CheckpointStore:
    """Versioned checkpoints of one named state in `directory` (format and scheme: module doc)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        name: str = "state",
        payload_bytes_max: int = PAYLOAD_BYTES_MAX_DEFAULT,
    ) -> None:
        assert name and "/" not in name and not name.startswith("."), f"unsafe name {name!r}"
        assert payload_bytes_max > 0
        self.directory = Path(directory)
        self.name = name
        self.payload_bytes_max = payload_bytes_max
        self._lock = threading.Lock()
        self._last_version: int | None = None
        self._current_written_by_us = False

    @property
    def tmp_path(self) -> Path:
        return self.directory / f"{self.name}.tmp"

    @property
    def current_path(self) -> Path:
        return self.directory / f"{self.name}.current"

    @property
    def old_path(self) -> Path:
        return self.directory / f"{self.name}.old"

    def save(self, payload: bytes) -> int:
        """Write `payload` as the next version; returns that version once it is durable."""
        if len(payload) > self.payload_bytes_max:
            raise CheckpointTooLargeError(
                f"{len(payload)} bytes above payload_bytes_max={self.payload_bytes_max}"
            )
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            if self._last_version is None:
                self._last_version = self._newest_valid_version()
            version = self._last_version + 1
            self._write_synced(self.tmp_path, encode_checkpoint(version, payload))
            if self._current_is_valid():
                os.replace(self.current_path, self.old_path)
            # A missing or corrupt CURRENT is simply overwritten: renaming it over OLD would
            # trade the one valid file left for garbage.
            os.replace(self.tmp_path, self.current_path)
            _fsync_directory(self.directory)
            self._last_version = version
            self._current_written_by_us = True
            return version

    def save_json(self, value: Any) -> int:
        return self.save(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8"))

    def load(self) -> Checkpoint | None:
        """The newest valid of CURRENT and OLD; None when the store never completed a save.

        Raises `NoValidCheckpointError` when CURRENT or OLD exists but neither is valid.
        """
        with self._lock:
            candidates, failures = self._read_candidates()
            if not candidates:
                if failures:
                    where = f"{self.directory}/{self.name}"
                    raise NoValidCheckpointError(f"{where}: " + "; ".join(failures))
                return None
            newest = max(candidates, key=lambda checkpoint: checkpoint.version)
            self._last_version = max(self._last_version or 0, newest.version)
            return newest

    def load_json(self) -> Any | None:
        checkpoint = self.load()
        return None if checkpoint is None else checkpoint.json()

    def _read_candidates(self) -> tuple[list[Checkpoint], list[str]]:
        candidates: list[Checkpoint] = []
        failures: list[str] = []
        for path in (self.current_path, self.old_path):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                candidates.append(decode_checkpoint(data, self.payload_bytes_max))
            except CorruptCheckpointError as error:
                failures.append(f"{path.name}: {error}")
        return candidates, failures

    def _current_is_valid(self) -> bool:
        if self._current_written_by_us:
            return True
        try:
            decode_checkpoint(self.current_path.read_bytes(), self.payload_bytes_max)
        except FileNotFoundError:
            return False
        except CorruptCheckpointError:
            return False
        return True

    def _newest_valid_version(self) -> int:
        candidates, _failures = self._read_candidates()
        return max((checkpoint.version for checkpoint in candidates), default=0)

    @staticmethod
    def _write_synced(path: Path, data: bytes) -> None:
        with open(path, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())


def _fsync_directory(directory: Path) -> None:
    # The renames are only durable once the directory entry itself reaches the disk.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

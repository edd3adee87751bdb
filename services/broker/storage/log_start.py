"""The persisted log start of one partition (Kafka's log-start-offset checkpoint), moved
forward by DeleteRecords (KIP-107).

Segments are deleted whole, so without this file the log start is the first segment's base.
DeleteRecords may move it inside a segment; that logical start must survive a restart, or
records a client deleted would be readable again.

File format (`DATA/<topic>/<p>/log-start`, big-endian; written to `log-start.tmp`, fsynced,
renamed into place, then the directory fsynced):

    0   4  magic           b"KLSO"
    4   2  format_version  LOG_START_FORMAT_VERSION (1)
    6   8  offset          i64 >= 0
    14  4  crc32c          u32 over the 14 bytes before it

Invariant: the file only ever grows the start (the partition writes a lower one only when a
truncation cuts below it). A missing file is a start of 0 (the partition's first segment base
rules); an unreadable one (torn, bad CRC: impossible after the fsynced rename unless the disk
lies) is logged and read as 0 -- the segments deleted below it stay deleted, so at worst the
start falls back to the first segment's base. The `.tmp` leftover of a crash is removed by the
partition's open (every `*.tmp` is).

Thread-safety: none; the owning PartitionLog calls it under its lock (and on open).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import crc32c

log = logging.getLogger(__name__)

LOG_START_FILE = "log-start"
LOG_START_MAGIC = b"KLSO"
LOG_START_FORMAT_VERSION = 1
_BODY = struct.Struct(">4sHq")
_CRC = struct.Struct(">I")
LOG_START_FILE_BYTES = _BODY.size + _CRC.size


def encode_log_start(offset: int) -> bytes:
    assert offset >= 0, f"negative log start {offset}"
    body = _BODY.pack(LOG_START_MAGIC, LOG_START_FORMAT_VERSION, offset)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_log_start(data: bytes) -> int | None:
    """The offset, or None when `data` is not a whole, valid file."""
    if len(data) != LOG_START_FILE_BYTES:
        return None
    body = data[:_BODY.size]
    (crc,) = _CRC.unpack_from(data, _BODY.size)
    if crc32c.crc32c(body) != crc:
        return None
    magic, version, offset = _BODY.unpack(body)
    if magic != LOG_START_MAGIC or version != LOG_START_FORMAT_VERSION or offset < 0:
        return None
    return offset


def read_log_start(directory: Path) -> int:
    path = directory / LOG_START_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    offset = decode_log_start(data)
    if offset is None:
        log.warning("%s: unreadable log start (%d bytes); the first segment's base rules",
                    path, len(data))
        return 0
    return offset


def write_log_start(directory: Path, offset: int) -> None:
    """Durably replace the file (see the module docstring); OSError as raised (ENOSPC is the
    caller's to turn into StorageFullError). A partial temporary file is removed."""
    path = directory / LOG_START_FILE
    tmp = path.with_name(LOG_START_FILE + ".tmp")
    data = encode_log_start(offset)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

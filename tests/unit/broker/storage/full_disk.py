"""A simulated full disk for the storage and replication tests: block reservations (the
`disk_space.fallocate` seam) or the `write` calls of one module fail with ENOSPC until the test
frees the disk."""

from __future__ import annotations

import errno
import os

from services.broker.storage import disk_space


class FullDisk:
    def __init__(self) -> None:
        self.full = True
        self.refused = 0  # calls that failed

    def check(self) -> None:
        if self.full:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def free(self) -> None:
        self.full = False


def refuse_reservations(monkeypatch) -> FullDisk:
    """Every posix_fallocate of the broker fails while the disk is full."""
    disk = FullDisk()
    real = disk_space.fallocate

    def fallocate(fd: int, offset: int, nbytes: int) -> None:
        disk.check()
        real(fd, offset, nbytes)

    monkeypatch.setattr(disk_space, "fallocate", fallocate)
    return disk


class _OsWithFullDisk:
    """The `os` module as one module sees it, except that `write` checks the disk first."""

    def __init__(self, disk: FullDisk) -> None:
        self._disk = disk

    def __getattr__(self, name: str):
        return getattr(os, name)

    def write(self, fd: int, data) -> int:
        self._disk.check()
        return os.write(fd, data)


def refuse_writes(monkeypatch, module) -> FullDisk:
    """Every os.write of `module` (journal.py, index_file.py) fails while the disk is full."""
    disk = FullDisk()
    monkeypatch.setattr(module, "os", _OsWithFullDisk(disk))
    return disk


def refuse_calls(monkeypatch, owner, name: str) -> FullDisk:
    """`owner.name(...)` (a function or method doing file writes) fails while the disk is
    full, before it writes anything."""
    disk = FullDisk()
    real = getattr(owner, name)

    def refused(*args, **kwargs):
        disk.check()
        return real(*args, **kwargs)

    if isinstance(owner.__dict__.get(name), classmethod):
        real = owner.__dict__[name].__func__

        def refused_classmethod(cls, *args, **kwargs):
            disk.check()
            return real(cls, *args, **kwargs)

        monkeypatch.setattr(owner, name, classmethod(refused_classmethod))
    else:
        monkeypatch.setattr(owner, name, refused)
    return disk

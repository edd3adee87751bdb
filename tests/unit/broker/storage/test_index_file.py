"""What the offset and time indexes share (index_file.py), through both: strictly increasing
entries on load, a write the file system cut short, the file's mode, the descriptor's life, and
a rewrite or delete that fails or finds nothing."""

import errno
import os
import stat
from array import array
from collections.abc import Callable
from pathlib import Path

import pytest

from services.broker.storage import index_file
from services.broker.storage.errors import CorruptIndexError
from services.broker.storage.offset_index import OffsetIndex, index_path
from services.broker.storage.time_index import TimeIndex, time_index_path


def _offset_index(tmp_path) -> OffsetIndex:
    return OffsetIndex(index_path(tmp_path, 100), 100)


@pytest.mark.parametrize(
    ("index_class", "entries"),
    [
        (OffsetIndex, [(1, 10), (1, 20)]),  # relative offsets equal
        (OffsetIndex, [(1, 10), (2, 10)]),  # positions equal
        (TimeIndex, [(1_000, 1), (1_000, 2)]),  # timestamps equal
        (TimeIndex, [(1_000, 1), (2_000, 1)]),  # relative offsets equal
    ],
)
def test_entries_that_repeat_a_column_are_corrupt(tmp_path, index_class, entries):
    path = tmp_path / "i"
    path.write_bytes(b"".join(index_class.ENTRY.pack(*entry) for entry in entries))
    with pytest.raises(CorruptIndexError, match="not strictly increasing"):
        index_class.read_entries(path)


def test_a_write_cut_short_is_cut_back_to_whole_entries_and_adds_nothing(tmp_path, monkeypatch):
    index = _offset_index(tmp_path)
    assert index.append(110, 500)
    real_write = os.write

    def half_write(fd, data):
        return real_write(fd, bytes(data)[: len(data) // 2])

    monkeypatch.setattr(index_file.os, "write", half_write)
    assert not index.append(120, 900)
    monkeypatch.undo()
    assert len(index) == 1 and index.entries() == [(10, 500)]
    assert index_path(tmp_path, 100).stat().st_size == OffsetIndex.ENTRY.size
    assert OffsetIndex.read_entries(index_path(tmp_path, 100)) == [(10, 500)]
    index.close()


def test_an_index_file_is_readable_by_all_writable_by_the_owner_only(tmp_path):
    old_umask = os.umask(0)
    try:
        index = TimeIndex(time_index_path(tmp_path, 0), 0)
        index.append(1_000, 5)
        index.close()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(time_index_path(tmp_path, 0).stat().st_mode) == 0o644


def _refers_to(fd: int, path: Path) -> bool:
    """Whether descriptor `fd` is open on `path` (a closed number may be reused for another
    file meanwhile: compared by inode)."""
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except OSError:
        return False


def test_close_releases_the_descriptor_and_a_later_write_reopens_it(tmp_path):
    index = _offset_index(tmp_path)
    index.append(110, 500)
    fd = index._fd
    assert _refers_to(fd, index.path)  # the scenario: the first write opened the file
    index.close()
    assert not _refers_to(fd, index.path), "close left the descriptor open"
    index.append(120, 900)
    assert _refers_to(index._fd, index.path)
    index.close()
    assert OffsetIndex.read_entries(index_path(tmp_path, 100)) == [(10, 500), (20, 900)]


def test_an_index_never_written_closes_flushes_and_deletes_quietly(tmp_path):
    index = _offset_index(tmp_path)
    assert not index.path.exists()  # the scenario: no file, no descriptor
    index.flush()
    index.close()
    index.delete()
    assert not index.path.exists()


def test_a_rewrite_that_fails_midway_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = index_path(tmp_path, 0)
    real_write_bytes = Path.write_bytes

    def torn(self, data):
        real_write_bytes(self, bytes(data)[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", torn)
    with pytest.raises(OSError, match="No space left"):
        OffsetIndex.rewrite(path, 0, [(1, 10), (2, 20)])
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_rewrite_that_fails_before_its_file_exists_raises_that_failure(tmp_path, monkeypatch):
    def refused(self, data):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(Path, "write_bytes", refused)
    with pytest.raises(OSError, match="Permission denied"):
        TimeIndex.rewrite(time_index_path(tmp_path, 0), 0, [(1_000, 1)])


class _ValuesSeenMidAppend(array):
    """An index's values array that lets `read` run right after it grew by one, before the
    relative offsets grow too: where a lock-free reader racing `_append` may look."""

    read: Callable[[], None]

    def append(self, value: int) -> None:
        super().append(value)
        self.read()


@pytest.mark.parametrize(("index_class", "first", "second"),
                         [(OffsetIndex, (110, 500), (120, 900)),  # (offset, position)
                          (TimeIndex, (1_000, 110), (2_000, 120))],  # (timestamp, offset)
                         ids=["offset", "time"])
def test_a_reader_racing_an_append_counts_only_the_entries_it_can_read(tmp_path, index_class,
                                                                        first, second):
    index = index_class(tmp_path / "i", 100)
    index.append(*first)
    relatives, values = index._entries
    values = _ValuesSeenMidAppend(values.typecode, values)
    index._entries = (relatives, values)
    seen: list[tuple[int, int, list]] = []  # (values, len(index), entries()) mid-append
    values.read = lambda: seen.append((len(values), len(index), index.entries()))
    assert index.append(*second)
    assert [values_then for values_then, _, _ in seen] == [2], "the reader came mid-append"
    # The value was there and its relative offset not yet: the reader counts one entry, the
    # one it can read whole.
    (_, count_then, entries_then), = seen
    assert count_then == len(entries_then) == 1 and entries_then == index.entries()[:1]
    assert len(index) == 2
    index.close()

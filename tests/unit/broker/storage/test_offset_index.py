import pytest

from services.broker.storage.errors import CorruptIndexError
from services.broker.storage.offset_index import OffsetIndex, index_path


@pytest.fixture
def index(tmp_path):
    idx = OffsetIndex.rewrite(index_path(tmp_path, 100), 100, [])
    yield idx
    idx.close()


def test_file_name_is_the_zero_padded_base_offset(tmp_path):
    assert index_path(tmp_path, 42).name == "00000000000000000042.index"


def test_lookup_finds_the_greatest_entry_at_or_below(index):
    for offset, position in [(110, 500), (120, 900), (135, 1300)]:
        index.append(offset, position)
    assert index.lookup(99) is None
    assert index.lookup(100) is None            # before the first entry: segment start
    assert index.lookup(110) == (110, 500)
    assert index.lookup(119) == (110, 500)
    assert index.lookup(120) == (120, 900)
    assert index.lookup(10**12) == (135, 1300)


def test_lookup_position(index):
    index.append(110, 500)
    index.append(120, 900)
    assert index.lookup_position(499) is None
    assert index.lookup_position(500) == (110, 500)
    assert index.lookup_position(899) == (110, 500)
    assert index.lookup_position(5000) == (120, 900)


def test_entries_persist_as_8_byte_big_endian_pairs(index, tmp_path):
    index.append(101, 16)
    index.append(200, 4096)
    raw = index_path(tmp_path, 100).read_bytes()
    assert raw == bytes.fromhex("00000001 00000010 00000064 00001000".replace(" ", ""))
    assert OffsetIndex.read_entries(index_path(tmp_path, 100)) == [(1, 16), (100, 4096)]


def test_truncate_to_position_drops_entries_at_and_after(index, tmp_path):
    for i in range(1, 6):
        index.append(100 + i * 10, i * 100)
    index.truncate_to_position(300)
    assert index.entries() == [(10, 100), (20, 200)]
    assert OffsetIndex.read_entries(index_path(tmp_path, 100)) == [(10, 100), (20, 200)]
    index.append(130, 300)  # appending continues after the cut
    assert index.lookup(135) == (130, 300)


def test_torn_file_is_corrupt(tmp_path):
    path = index_path(tmp_path, 0)
    path.write_bytes(bytes(12))
    with pytest.raises(CorruptIndexError):
        OffsetIndex.read_entries(path)


def test_unordered_file_is_corrupt(tmp_path):
    path = index_path(tmp_path, 0)
    path.write_bytes(bytes.fromhex("0000000500000100" "0000000300000200"))
    with pytest.raises(CorruptIndexError):
        OffsetIndex.read_entries(path)


def test_rewrite_replaces_the_file(tmp_path):
    path = index_path(tmp_path, 0)
    path.write_bytes(b"garbage!garbage")
    idx = OffsetIndex.rewrite(path, 0, [(3, 64)])
    idx.close()
    assert OffsetIndex.read_entries(path) == [(3, 64)]
    assert not path.with_name(path.name + ".tmp").exists()

import dataclasses

import pytest

from common.kaska.errors import CorruptBatchError, DuplicateSequenceError, OutOfOrderSequenceError
from common.kaska.record_batch import parse_header
from services.broker.storage.producer_state import ProducerStateTable

from .batches import batch, new_producer_id

PID = new_producer_id()


def header(sequence, producer_id=PID, count=1):
    return parse_header(batch(*[b"r"] * count, producer_id=producer_id, sequence=sequence))


def table_with(*sequences, base=0):
    table = ProducerStateTable(producer_ids_max=100)
    for n, seq in enumerate(sequences):
        table.record(header(seq), base + n)
    return table


def test_non_idempotent_batches_are_never_checked():
    table = ProducerStateTable(100)
    plain = header(-1, producer_id=bytes(16))
    assert table.check(plain) is None
    table.record(plain, 0)
    assert table.check(plain) is None and len(table) == 0


def test_unknown_producer_accepts_any_sequence():
    assert ProducerStateTable(100).check(header(4711)) is None


def test_next_sequence_is_appended():
    assert table_with(0, 1, 2).check(header(3)) is None


@pytest.mark.parametrize("seq", range(2, 7))
def test_remembered_sequence_is_a_duplicate_with_its_original_offset(seq):
    table = table_with(0, 1, 2, 3, 4, 5, 6, base=100)
    original = table.check(header(seq))
    assert (original.sequence, original.base_offset) == (seq, 100 + seq)


def test_forgotten_old_sequence_is_a_duplicate_sequence_error():
    with pytest.raises(DuplicateSequenceError):
        table_with(0, 1, 2, 3, 4, 5, 6).check(header(1))


def test_gap_is_out_of_order():
    with pytest.raises(OutOfOrderSequenceError, match="1 batch"):
        table_with(0, 1).check(header(3))


def test_producers_are_independent():
    table = table_with(0, 1)
    other = new_producer_id()
    assert table.check(header(0, producer_id=other)) is None
    assert table.check(header(0)).base_offset == 0


def test_negative_sequence_of_an_idempotent_producer_is_corrupt():
    with pytest.raises(CorruptBatchError):
        table_with(0).check(header(-1))


def test_least_recently_seen_producer_is_forgotten_beyond_the_bound():
    table = ProducerStateTable(producer_ids_max=2)
    a, b, c = new_producer_id(), new_producer_id(), new_producer_id()
    table.record(header(0, a), 0)
    table.record(header(0, b), 1)
    table.record(header(1, a), 2)  # a is now the most recent
    table.record(header(0, c), 3)
    assert table.last_sequence(b) is None
    assert table.last_sequence(a) == 1 and table.last_sequence(c) == 0


def test_load_remembers_the_stamped_base_offsets():
    table = ProducerStateTable(100)
    for seq in range(3):
        table.load(dataclasses.replace(header(seq), base_offset=10 + seq * 2))
    assert table.check(header(1)).base_offset == 12
    assert table.check(header(3)) is None

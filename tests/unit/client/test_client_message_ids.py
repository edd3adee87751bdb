"""Message id -> (partition, sequence): dense per-partition sequences, a bijection."""

from hypothesis import given
from hypothesis import strategies as st

from client.message_ids import Placement, message_id, place


def test_round_robin_with_dense_sequences_per_partition():
    placements = [place(m, 4) for m in range(10)]
    assert [(p.partition, p.sequence) for p in placements] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1), (0, 2), (1, 2)]


def test_one_partition_sequence_is_the_message_id():
    assert [place(m, 1) for m in range(3)] == [Placement(0, 0), Placement(0, 1), Placement(0, 2)]


@given(st.integers(0, 10**9), st.integers(1, 64))
def test_inverse(m, partitions):
    assert message_id(place(m, partitions), partitions) == m


@given(st.integers(1, 500), st.integers(1, 16))
def test_every_partition_gets_0_to_n_without_gaps(messages, partitions):
    seen: dict[int, list[int]] = {}
    for m in range(messages):
        placement = place(m, partitions)
        seen.setdefault(placement.partition, []).append(placement.sequence)
    for sequences in seen.values():
        assert sequences == list(range(len(sequences)))

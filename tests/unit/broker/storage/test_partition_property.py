"""PartitionLog against a plain in-memory model: random appends, idempotent retries and gaps,
failed fills, reopens and truncations; after every step the log reads back as the model."""

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from common.kaska.errors import DuplicateSequenceError, OutOfOrderSequenceError
from common.kaska.record_batch import iter_batches
from services.broker.storage.partition import PartitionLog
from services.broker.storage.producer_state import BATCHES_REMEMBERED

from .batches import SMALL, batch, records

CONFIG = replace(SMALL, segment_bytes_max=1024, batch_bytes_max=512, index_interval_bytes=128)
PRODUCERS = (bytes(15) + b"\x01", bytes(15) + b"\x02")
values_st = st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=3)


@dataclass
class ModelBatch:
    base_offset: int
    values: list[bytes]
    producer: bytes
    sequence: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class PartitionMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="kaska-prop-"))
        self.part = PartitionLog(self.directory, CONFIG)
        self.batches: list[ModelBatch] = []

    def teardown(self):
        self.part.close()
        shutil.rmtree(self.directory)

    # -- model helpers -------------------------------------------------------------------

    @property
    def end(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    def history(self, producer: bytes) -> list[ModelBatch]:
        return [b for b in self.batches if b.producer == producer]

    def store(self, values, producer=bytes(16), sequence=-1):
        result = self.part.append(batch(*values, producer_id=producer, sequence=sequence))
        assert (result.base_offset, result.duplicate) == (self.end, False)
        self.batches.append(ModelBatch(self.end, values, producer, sequence))

    # -- rules ---------------------------------------------------------------------------

    @rule(values=values_st)
    def append_plain(self, values):
        self.store(values)

    @rule(values=values_st, producer=st.sampled_from(PRODUCERS))
    def append_next_sequence(self, values, producer):
        history = self.history(producer)
        self.store(values, producer, history[-1].sequence + 1 if history else 0)

    @rule(producer=st.sampled_from(PRODUCERS), back=st.integers(0, BATCHES_REMEMBERED + 2))
    def retry_old_sequence(self, producer, back):
        history = self.history(producer)
        if not history or history[-1].sequence < back:
            return
        sequence = history[-1].sequence - back
        remembered = {b.sequence: b for b in history[-BATCHES_REMEMBERED:]}
        candidate = batch(b"retry", producer_id=producer, sequence=sequence)
        if sequence in remembered:
            result = self.part.append(candidate)
            assert result.duplicate and result.base_offset == remembered[sequence].base_offset
        else:
            try:
                self.part.append(candidate)
            except DuplicateSequenceError:
                return
            raise AssertionError(f"sequence {sequence} was not refused")

    @rule(producer=st.sampled_from(PRODUCERS), gap=st.integers(2, 5))
    def skip_sequences(self, producer, gap):
        history = self.history(producer)
        if not history:
            return
        try:
            self.part.append(batch(b"gap", producer_id=producer,
                                   sequence=history[-1].sequence + gap))
        except OutOfOrderSequenceError:
            return
        raise AssertionError("a sequence gap was accepted")

    @rule(cut=st.integers(1, 200))
    def fill_breaks_midway(self, cut):
        data = batch(b"z" * 150)

        def broken(region):
            region[:cut] = data[:cut]
            raise ConnectionResetError

        try:
            self.part.append_from(len(data), broken)
        except ConnectionResetError:
            return
        raise AssertionError("the fill's exception was swallowed")

    @rule()
    def reopen(self):
        self.part.close()
        self.part = PartitionLog(self.directory, CONFIG)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(0, self.end))
        self.part.truncate_to(offset)
        self.batches = [b for b in self.batches if b.next_offset <= offset]

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def reads_back_as_the_model(self):
        assert self.part.log_end_offset == self.end
        expected = [(b.base_offset + i, v) for b in self.batches for i, v in enumerate(b.values)]
        assert records(self.part.read_bytes(0, 10**7)) == expected

    @invariant()
    def every_offset_starts_its_own_read(self):
        for model in self.batches[-3:]:
            for offset in range(model.base_offset, model.next_offset):
                first = next(iter_batches(self.part.read_bytes(offset, 1)))[0]
                assert first.base_offset == model.base_offset


PartitionMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestPartitionAgainstModel = PartitionMachine.TestCase

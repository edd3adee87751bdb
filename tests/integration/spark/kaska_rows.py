"""Rows written to a topic the way clients write them (Arrow IPC payloads, producer id = client
id, one record batch per payload), and the rows the `kaska` source must return for them."""

from __future__ import annotations

import uuid

import pyarrow as pa

from common.flights.arrow_rows import encode_rows, with_row_ids
from common.kaska import Admin, Producer
from common.kaska.errors import TopicAlreadyExistsError
from tests.integration.broker.broker_process import CLIENT_OPTIONS

COLUMNS = ("legId", "totalFare", "note")
SCHEMA = pa.schema([(name, pa.string()) for name in COLUMNS])


class RowsProducer:
    """Appends records of `rows_per_record` rows to every partition of one topic; remembers
    the output row (columns..., client_id, message_id, row_id) of every row sent."""

    def __init__(self, address: str, topic: str, partitions: int, rows_per_record: int = 3,
                 records_per_batch: int = 1) -> None:
        self.topic = topic
        self.partitions = partitions
        self.rows_per_record = rows_per_record
        self.records_per_batch = records_per_batch
        self.client_id = str(uuid.uuid4())
        self.expected: list[tuple] = []
        self.offsets: list[list[tuple]] = [[] for _ in range(partitions)]  # rows by offset
        self._next_row_id = 0
        with Admin(address, **CLIENT_OPTIONS) as admin:
            try:
                admin.create_topic(topic, partitions)
            except TopicAlreadyExistsError:
                pass  # a second producer on the same topic
        self._producer = Producer(address, self.client_id, **CLIENT_OPTIONS)

    def produce(self, batches_per_partition: int) -> list[tuple]:
        """Send the batches; the output rows they hold."""
        added = []
        for _ in range(batches_per_partition):
            for partition in range(self.partitions):
                message_id = self._producer.next_sequence(self.topic, partition)
                records = [self._record(partition, message_id, added)
                           for _ in range(self.records_per_batch)]
                self._producer.send_batch(self.topic, partition, [r[0] for r in records])
                self.offsets[partition] += [r[1] for r in records]
        self.expected += added
        return added

    def _record(self, partition: int, message_id: int, added: list) -> tuple[bytes, list]:
        first = self._next_row_id
        self._next_row_id += self.rows_per_record
        legs = [f"p{partition}-m{message_id}-r{first + i}" for i in range(self.rows_per_record)]
        batch = pa.RecordBatch.from_arrays(
            [pa.array(legs), pa.array([f"{first + i}.5" for i in range(len(legs))]),
             pa.array([None if i % 2 else "x,y" for i in range(len(legs))], pa.string())],
            schema=SCHEMA)
        rows = [(*row.values(), self.client_id, message_id, first + i)
                for i, row in enumerate(batch.to_pylist())]
        added += rows
        return encode_rows(with_row_ids(batch, first)), rows

    def rows_between(self, starts: list[int], ends: list[int]) -> list[tuple]:
        """The output rows of offsets [start, end) of every partition."""
        return [row for partition in range(self.partitions)
                for rows in self.offsets[partition][starts[partition]:ends[partition]]
                for row in rows]

    def close(self) -> None:
        self._producer.close()

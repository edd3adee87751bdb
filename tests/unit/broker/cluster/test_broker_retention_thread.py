"""The retention pass: whole old segments go, below the safe offset; `__offsets` is only
compacted (test_broker_offsets_compaction.py), never trimmed by size or age."""

from common.kaska.record_batch import encode_batch
from common.kaska.topic_name import OFFSETS_TOPIC
from services.broker.cluster.retention import RetentionThread
from services.broker.storage.config import LogConfig
from services.broker.storage.log import Log

CONFIG = LogConfig(segment_bytes_max=4096, batch_bytes_max=2048, retention_bytes=4096)


def _fill(storage, topic, batches):
    partition = storage.partition(topic, 0)
    for _ in range(batches):
        partition.append(encode_batch([b"x" * 1000], timestamp_ms=1))
    return partition


def test_run_once_trims_data_topics_and_spares_offsets(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        storage.create_topic("data", 1)
        storage.create_topic(OFFSETS_TOPIC, 1)
        data = _fill(storage, "data", 20)
        offsets = _fill(storage, OFFSETS_TOPIC, 20)
        segments_before = offsets.segment_count
        deleted = RetentionThread(storage, interval_ms=60_000, clock_ms=lambda: 10).run_once()
        assert deleted > 0
        assert data.log_start_offset > 0 and data.log_end_offset == 20
        assert offsets.log_start_offset == 0 and offsets.segment_count == segments_before


def test_thread_stops_promptly(tmp_path):
    with Log(tmp_path, CONFIG) as storage:
        thread = RetentionThread(storage, interval_ms=60_000)
        thread.start()
        thread.stop()
        assert not thread._thread.is_alive()


def test_run_once_stays_below_the_safe_offset(tmp_path):
    asked = []

    def safe_offset(topic, partition):
        asked.append((topic, partition))
        return 4

    with Log(tmp_path, CONFIG) as storage:
        storage.create_topic("data", 1)
        data = _fill(storage, "data", 20)  # 3 batches of ~1 KiB per 4 KiB segment
        RetentionThread(storage, interval_ms=60_000, clock_ms=lambda: 10,
                        safe_offset=safe_offset).run_once()
        assert asked == [("data", 0)]
        assert 0 < data.log_start_offset <= 4 and data.log_end_offset == 20

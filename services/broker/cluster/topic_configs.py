"""A topic's own settings: the few of Kafka's topic configs Kaska has per topic -- retention by
time and by size, and the segment size -- given when the topic is created.

Where they live: in the committed offsets table (`__offsets`, committed_offsets.py), under the
group "" that no consumer group can have (group ids hold 1..255 characters), the topic's name
and the setting's number (`KEYS`) as the partition: `("", topic, number) -> value + 1` (the
offset is never negative; -1, "unbounded", is stored as 0). So they replicate, survive restarts
and compaction, and are dropped with the topic's commits when it is deleted
(`CommittedOffsets.forget_topic`), exactly as committed offsets are. `__offsets` is replicated
by the metadata group, whose leader is the controller that takes CreateTopics; the settings
are written (one replicated batch) before the topic is created, so every broker that opens
the topic's partitions has normally read them already; one that had not yet gives them to its
partitions as soon as it reads them (`TopicConfigs.changed`).

What they change: `PartitionLog.reconfigure` with the broker's LogConfig where the topic
overrides it -- retention from the next retention pass, the segment size from the next append
(storage/config.py, `segment_roll_bytes`).

Pure functions, and `TopicConfigs` (thread-safe: it reads the table, which locks itself).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from common.kaska.errors import KaskaError
from services.broker.storage.config import SEGMENT_ROLL_BYTES_MIN, LogConfig

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"
# Kafka's name -> the number stored as the key's partition (never reuse one).
KEYS: dict[str, int] = {RETENTION_MS: 1, RETENTION_BYTES: 2, SEGMENT_BYTES: 3}
NAMES: dict[int, str] = {number: name for name, number in KEYS.items()}
UNBOUNDED = -1  # Kafka's -1: no retention limit
INT64_MAX = 2**63 - 2  # stored as value + 1 in an i64


class InvalidTopicConfigError(KaskaError):
    """Topic configs Kaska cannot take: an unknown or unsupported key, or a bad value."""


def parse(configs: Iterable[tuple[str, str | None]], base: LogConfig) -> dict[str, int]:
    """The settings of a CreateTopics' (name, value) pairs; InvalidTopicConfigError naming
    every key Kaska does not have per topic, or the first bad value."""
    pairs = list(configs)
    refused = sorted({name for name, _value in pairs if name not in KEYS})
    if refused:
        raise InvalidTopicConfigError(
            f"topic configs not supported: {', '.join(refused)} (supported: "
            f"{', '.join(sorted(KEYS))}; the others are the broker's, see DescribeConfigs)"
        )
    settings: dict[str, int] = {}
    for name, value in pairs:
        if value is None:
            continue  # null: the broker's value, as Kafka reads it
        settings[name] = _value(name, value, base)
    return settings


def _value(name: str, text: str, base: LogConfig) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidTopicConfigError(f"{name}={text!r} is not an integer") from None
    if name == SEGMENT_BYTES:
        if not SEGMENT_ROLL_BYTES_MIN <= value <= base.segment_bytes_max:
            raise InvalidTopicConfigError(
                f"{name}={value}: must lie in [{SEGMENT_ROLL_BYTES_MIN}, "
                f"{base.segment_bytes_max}] (the broker's --segment-bytes-max)"
            )
    elif not UNBOUNDED <= value <= INT64_MAX:
        raise InvalidTopicConfigError(f"{name}={value}: must be -1 (unbounded) or >= 0")
    return value


def log_config(base: LogConfig, settings: Mapping[str, int]) -> LogConfig:
    """The broker's LogConfig with a topic's settings applied."""
    changes: dict[str, int | None] = {}
    if RETENTION_MS in settings:
        changes["retention_ms"] = None if settings[RETENTION_MS] < 0 else settings[RETENTION_MS]
    if RETENTION_BYTES in settings:
        changes["retention_bytes"] = (
            None if settings[RETENTION_BYTES] < 0 else settings[RETENTION_BYTES]
        )
    if SEGMENT_BYTES in settings:
        changes["segment_roll_bytes"] = settings[SEGMENT_BYTES]
    return replace(base, **changes) if changes else base


def stored(value: int) -> int:
    """A setting as the table's offset (never negative)."""
    return value + 1


def loaded(offset: int) -> int:
    return offset - 1


class TopicConfigs:
    """The topic settings of the committed offsets table, kept in a copy of their own that
    `changed` refreshes (the table calls it, outside its lock, whenever they change), and
    handed to the partitions. Reading the copy takes no lock of the table's: a Log creating a
    partition asks for its settings under its own lock, on a replication group's apply step,
    while a commit may hold the table's lock waiting for that group to commit."""

    def __init__(self, offsets, base: LogConfig) -> None:
        """`offsets`: the broker's CommittedOffsets."""
        self._offsets = offsets
        self._base = base
        self._logs: list = []
        self._lock = threading.Lock()  # serialises refreshes; reads take the dict as it is
        self._settings: dict[str, dict[str, int]] = {}  # replaced whole, never mutated

    def attach(self, logs: Iterable) -> None:
        """Follow the table (`on_topic_configs`) and configure the partitions of `logs`, whose
        resolvers are set; the settings already in the table are read now."""
        self._logs = list(logs)
        for log in self._logs:
            log.topic_config = self.log_config
        self._offsets.on_topic_configs = self.changed
        self.changed(self._offsets.config_topics())

    def prepare(self, topic: str, settings: Mapping[str, int]) -> None:
        """Store the settings of a topic about to be created (the others reset: nothing of an
        earlier topic of that name survives); one replicated append, none when there is
        nothing to store or reset. NotLeaderError where this broker does not lead `__offsets`
        (the metadata group: where topics are created)."""
        write(self._offsets.set_topic_configs, topic, settings)

    def settings(self, topic: str) -> dict[str, int]:
        return dict(self._settings.get(topic, {}))

    def log_config(self, topic: str) -> LogConfig:
        return log_config(self._base, self.settings(topic))

    def changed(self, topics: Iterable[str]) -> None:
        """Read `topics`' settings from the table again and give their partitions them."""
        for topic in topics:
            with self._lock:
                fresh = {
                    NAMES[number]: loaded(offset)
                    for number, offset in self._offsets.topic_configs(topic).items()
                    if number in NAMES
                }
                settings = dict(self._settings)
                if fresh:
                    settings[topic] = fresh
                else:
                    settings.pop(topic, None)
                self._settings = settings
                config = self.log_config(topic)
                for log in self._logs:  # under the lock: a later refresh is applied later
                    for p in log.held(topic):
                        _reconfigure(log, topic, p, config)


def _reconfigure(log, topic: str, p: int, config: LogConfig) -> None:
    try:
        log.partition(topic, p).reconfigure(config)
    except KaskaError:
        return  # deleted meanwhile: nothing to configure


def write(
    set_configs: Callable[[str, dict[int, int | None]], None],
    topic: str,
    settings: Mapping[str, int],
) -> None:
    """Store `topic`'s settings: every key, those not given reset (so nothing of an earlier
    topic of that name survives)."""
    set_configs(
        topic,
        {
            number: stored(settings[name]) if name in settings else None
            for name, number in KEYS.items()
        },
    )

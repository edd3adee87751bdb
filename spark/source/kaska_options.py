"""The `kaska` source's options, parsed once on the driver (see spark/source/kaska_source.py for the
list and their meaning).

Offsets options are kept in one form for one topic and for a pattern: `earliest` / `latest`, or
{topic: {partition: offset}} where an offset may be Kafka's -2 (earliest) / -1 (latest).

Thread-safety: `KaskaOptions` is a frozen, picklable value (Spark ships it to every task).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from common.flights.arrow_rows import ROW_ID
from common.kaska.range_reader import (
    FETCH_BYTES_MAX_DEFAULT,
    RETRY_DEADLINE_S_DEFAULT,
    RangeReader,
)

CLIENT_ID, MESSAGE_ID = "client_id", "message_id"
EXTRA_COLUMNS = (CLIENT_ID, MESSAGE_ID, ROW_ID)
EARLIEST, LATEST = "earliest", "latest"
EARLIEST_SENTINEL, LATEST_SENTINEL = -2, -1  # Kafka's markers inside the JSON form
ARROW_BATCH_ROWS_MAX_DEFAULT = 10_000
TOPIC_PLACEHOLDER = "{topic}"  # replaced in `arrowTransformArgument` by the partition's topic

# Offsets per partition, or "earliest" / "latest" for all of them.
OffsetSpec = str | dict[int, int]
# The same for several topics: "earliest" / "latest", or {topic: {partition: offset}}.
TopicsOffsetSpec = str | dict[str, dict[int, int]]


class KaskaOptionsError(ValueError):
    """A `kaska` source option that is missing or does not parse."""


@dataclass(frozen=True)
class KaskaOptions:
    brokers: str
    topic: str | None
    starting: TopicsOffsetSpec
    ending: TopicsOffsetSpec
    columns: tuple[str, ...] | None
    token: str | None = None
    fetch_bytes_max: int = FETCH_BYTES_MAX_DEFAULT
    retry_deadline_s: float = RETRY_DEADLINE_S_DEFAULT
    offsets_per_slice_max: int | None = None
    arrow_batch_rows_max: int = ARROW_BATCH_ROWS_MAX_DEFAULT
    commit_group: str | None = None
    include_ids: bool = True
    arrow_transform: str | None = None
    arrow_transform_argument: str | None = None
    subscribe_pattern: str | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    topic_gate: str | None = None
    topic_gate_argument: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> KaskaOptions:
        lowered = {key.lower(): value for key, value in options.items()}
        brokers = lowered.get("brokers")
        topic, pattern = _subscription(lowered, streaming)
        if not brokers:
            raise KaskaOptionsError("the kaska source needs the `brokers` option")
        default_start = LATEST if streaming else EARLIEST
        return cls(
            brokers=brokers,
            topic=topic,
            starting=parse_topics_offsets(lowered.get("startingoffsets", default_start),
                                          topic, pattern),
            ending=parse_topics_offsets(lowered.get("endingoffsets", LATEST), topic, pattern),
            columns=_parse_columns(lowered.get("columns")),
            token=lowered.get("token"),
            fetch_bytes_max=_positive(lowered, "fetchbytesmax", int, FETCH_BYTES_MAX_DEFAULT),
            retry_deadline_s=_positive(lowered, "retrydeadlines", float,
                                       RETRY_DEADLINE_S_DEFAULT),
            offsets_per_slice_max=_positive(lowered, "offsetsperslicemax", int, None),
            arrow_batch_rows_max=_positive(lowered, "arrowbatchrowsmax", int,
                                           ARROW_BATCH_ROWS_MAX_DEFAULT),
            commit_group=lowered.get("commitgroup"),
            include_ids=_boolean(lowered, "includeids", True),
            arrow_transform=_arrow_transform_name(lowered),
            arrow_transform_argument=_arrow_transform_argument(lowered),
            subscribe_pattern=pattern,
            max_offsets_per_trigger=_positive(lowered, "maxoffsetspertrigger", int, None),
            fail_on_data_loss=_boolean(lowered, "failondataloss", True),
            topic_gate=_topic_gate_name(lowered),
            topic_gate_argument=_topic_gate_argument(lowered),
        )

    def range_reader(self) -> RangeReader:
        return RangeReader(self.brokers, token=self.token, fetch_bytes_max=self.fetch_bytes_max,
                           retry_deadline_s=self.retry_deadline_s)

    def follows(self, topic: str) -> bool:
        """Whether `topic` is one this source reads (its `topic`, or a whole-name match)."""
        if self.subscribe_pattern is None:
            return topic == self.topic
        return re.fullmatch(self.subscribe_pattern, topic) is not None


def _subscription(options: Mapping[str, str], streaming: bool) -> tuple[str | None, str | None]:
    """(topic, subscribePattern): exactly one for a stream, the topic for a batch read."""
    topic, pattern = options.get("topic"), options.get("subscribepattern")
    if not streaming:
        if pattern is not None:
            raise KaskaOptionsError("`subscribePattern` is for streaming reads; a batch read "
                                    "takes one `topic`")
        if not topic:
            raise KaskaOptionsError("the kaska source needs the `brokers` and `topic` options")
        return topic, None
    if (topic is None) == (pattern is None) or (topic == "" or pattern == ""):
        raise KaskaOptionsError("a kaska stream needs exactly one of `topic` and "
                                "`subscribePattern`")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise KaskaOptionsError(f"`subscribePattern` {pattern!r}: {error}") from error
        if "columns" not in options:
            raise KaskaOptionsError("`subscribePattern` needs `columns` (there is no one "
                                    "topic whose first record could name them)")
    return topic, pattern


def parse_topics_offsets(text: str, topic: str | None,
                         pattern: str | None = None) -> TopicsOffsetSpec:
    """`earliest`, `latest`, or `{"<topic>": {"<partition>": offset}, ...}` naming `topic`
    alone, or only topics `pattern` matches whole."""
    if text.strip().lower() in (EARLIEST, LATEST):
        return text.strip().lower()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise KaskaOptionsError(f"offsets option is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise KaskaOptionsError(f"offsets JSON must be an object of topics: {text!r}")
    if pattern is None and set(document) != {topic}:
        raise KaskaOptionsError(f"offsets JSON must name exactly the topic {topic!r}: {text!r}")
    if pattern is not None:
        strangers = sorted(name for name in document if re.fullmatch(pattern, name) is None)
        if strangers:
            raise KaskaOptionsError(f"offsets JSON names topics {strangers} that "
                                    f"`subscribePattern` {pattern!r} does not match")
    return {name: _partition_offsets(name, offsets, text) for name, offsets in document.items()}


def _partition_offsets(topic: str, per_partition, text: str) -> dict[int, int]:
    if not isinstance(per_partition, dict):
        raise KaskaOptionsError(f"offsets of {topic!r} must be an object: {text!r}")
    offsets = {}
    for key, offset in per_partition.items():
        offset_ok = (isinstance(offset, int) and not isinstance(offset, bool)
                     and offset >= EARLIEST_SENTINEL)
        if not (str(key).isdigit() and offset_ok):
            raise KaskaOptionsError(f"bad partition offset {key!r}: {offset!r}")
        offsets[int(key)] = offset
    return offsets


def parse_offsets(text: str, topic: str) -> OffsetSpec:
    """`earliest`, `latest`, or `{"<topic>": {"<partition>": offset}}` -> {partition: offset}."""
    return topic_spec(parse_topics_offsets(text, topic), topic)


def topic_spec(spec: TopicsOffsetSpec, topic: str) -> OffsetSpec:
    """One topic's part of a several-topics spec (no entry: every partition at its default)."""
    return spec if isinstance(spec, str) else spec.get(topic, {})


def offsets_json(topic: str, offsets: Mapping[int, int] | list[int]) -> str:
    """The JSON form of per-partition offsets (a list is indexed by partition)."""
    items = enumerate(offsets) if isinstance(offsets, list) else offsets.items()
    return json.dumps({topic: {str(partition): offset for partition, offset in items}})


def _parse_columns(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    try:
        columns = json.loads(text)
    except json.JSONDecodeError as error:
        raise KaskaOptionsError(f"`columns` is not a JSON list: {error}") from error
    if not (isinstance(columns, list) and all(isinstance(c, str) and c for c in columns)):
        raise KaskaOptionsError(f"`columns` must be a JSON list of names: {text!r}")
    if len(set(columns)) != len(columns) or set(columns) & set(EXTRA_COLUMNS):
        raise KaskaOptionsError(f"`columns` repeats a name or names one of {EXTRA_COLUMNS}")
    return tuple(columns)


def _arrow_transform_name(options: Mapping[str, str]) -> str | None:
    name = options.get("arrowtransform")
    if name is None:
        return None
    if "columns" not in options:
        raise KaskaOptionsError("`arrowTransform` needs the `columns` it reads")
    load_function(name, "arrowTransform")  # fails here, on the driver, not in every task
    return name


def _arrow_transform_argument(options: Mapping[str, str]) -> str | None:
    argument = options.get("arrowtransformargument")
    if argument is not None and "arrowtransform" not in options:
        raise KaskaOptionsError("`arrowTransformArgument` needs an `arrowTransform`")
    return argument


def _topic_gate_name(options: Mapping[str, str]) -> str | None:
    name = options.get("topicgate")
    if name is not None:
        load_function(name, "topicGate")
    return name


def _topic_gate_argument(options: Mapping[str, str]) -> str | None:
    argument = options.get("topicgateargument")
    if argument is not None and "topicgate" not in options:
        raise KaskaOptionsError("`topicGateArgument` needs a `topicGate`")
    return argument


def transform_argument(argument: str | None, topic: str) -> str | None:
    """`arrowTransformArgument` for the rows of `topic`: `{topic}` replaced by its name."""
    return None if argument is None else argument.replace(TOPIC_PLACEHOLDER, topic)


def load_function(name: str, option: str = "arrowTransform") -> Callable:
    """The function named `module:function` (for the option called `option`)."""
    module_name, _, function_name = name.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise KaskaOptionsError(f"{option} {name!r}: {error}") from error
    if not callable(function):
        raise KaskaOptionsError(f"{option} {name!r} is not a function")
    return function


def load_transform(name: str) -> Callable[[pa.Table], pa.Table]:
    """The `arrowTransform` named `module:function`."""
    return load_function(name, "arrowTransform")


def _boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in options:
        return default
    text = str(options[key]).strip().lower()
    if text not in ("true", "false"):
        raise KaskaOptionsError(f"option {key} must be true or false, got {options[key]!r}")
    return text == "true"


def _positive(options: Mapping[str, str], key: str, kind, default):
    if key not in options:
        return default
    try:
        value = kind(options[key])
    except ValueError as error:
        raise KaskaOptionsError(f"option {key}: {error}") from error
    if value <= 0:
        raise KaskaOptionsError(f"option {key} must be positive, got {value}")
    return value

"""The topic gate of a `kaska` stream: which matched topics it reads, and how far.

Option `topicGate` = `module:function`, a function

    gate(topic: str, argument: str | None) -> TopicAdmission

(`argument` is option `topicGateArgument`, None without it). The stream reader calls it on the
driver, in `initialOffset` and in every `latestOffset`, once per topic its subscription matches
(with `topic` too), before planning that micro-batch. Without the option every matched topic is
admitted uncapped.

- `admitted=False`: a topic the stream does not follow yet is not read at all: it is neither in
  the offsets nor counted as discovered; once admitted it starts at its earliest offset. A
  topic it already follows is held where it is (not advanced, not dropped: dropping it would
  make its later admission read it again from the start).
- `end_offsets`: {partition: offset}, a cap: the stream never reads a partition past it (a
  partition not in it is uncapped). With a session's final offsets as the cap the stream reads
  that session exactly.

A gate raising fails the micro-batch's planning (the query): the gate is the service's code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spark.source.kaska_options import KaskaOptions, load_function


class KaskaGateError(ValueError):
    """A `topicGate` answered something that is not a TopicAdmission."""


@dataclass(frozen=True)
class TopicAdmission:
    admitted: bool
    end_offsets: Mapping[int, int] | None = field(default=None)

    def __post_init__(self) -> None:
        caps = self.end_offsets or {}
        if not all(isinstance(p, int) and isinstance(o, int) and p >= 0 and o >= 0
                   for p, o in caps.items()):
            raise KaskaGateError(f"end_offsets must map partitions to offsets >= 0: {caps!r}")


ADMIT_ALL = TopicAdmission(admitted=True)

Gate = Callable[[str], TopicAdmission]


def bound_gate(options: KaskaOptions) -> Gate:
    """The options' gate as a function of the topic alone (admit-all without `topicGate`)."""
    if options.topic_gate is None:
        return lambda topic: ADMIT_ALL
    function, argument = load_function(options.topic_gate, "topicGate"), \
        options.topic_gate_argument

    def gate(topic: str) -> TopicAdmission:
        admission = function(topic, argument)
        if not isinstance(admission, TopicAdmission):
            raise KaskaGateError(f"topicGate {options.topic_gate} answered {admission!r} for "
                                 f"{topic}, not a TopicAdmission")
        return admission

    return gate

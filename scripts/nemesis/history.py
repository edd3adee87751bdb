"""What the nemesis's clients did and saw, and the checker that judges it.

A `History` holds every produce attempt (producer, its n-th value, topic, partition, the
topic's incarnation when it was sent, outcome ack / fail / maybe, the acknowledged offset)
and every record read (who read it, topic, partition, the incarnation it was read in, offset,
value). Each value names its producer, its number, its topic and incarnation (`encode_value`),
so a read record says where it was meant to go. An incarnation is the nemesis's own count of a
topic's creations: the clients send and read only while it cannot change (workload.TopicGate).

`check(history)` returns the findings; none means the history is what a replicated log
promises:
- every value read was sent (no phantom), to that topic and partition, in the incarnation it
  was read in, and not reported by the client as "not delivered";
- one offset of one incarnation holds one value, whoever read it and when;
- no value is stored at two offsets (nothing duplicated, acknowledged or not);
- every acknowledged record of a topic's last incarnation is in the final read, at the offset
  its acknowledgement named; one of any incarnation is read at that offset by every consumer
  that read that partition incarnation past it (consumers read every record in turn);
- a producer's acknowledged records of one partition and incarnation lie in the order it sent
  them.
Pure: no I/O, no clock. Appending to the lists from several threads is safe (list.append).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

ACK = "ack"  # acknowledged: must be read back, once, at its offset
FAIL = "fail"  # the client says it was not stored: must never be read
MAYBE = "maybe"  # may have been stored: read at most once
FINAL_READER = "final"  # the read of everything after the faults were healed
UNKNOWN_OFFSET = -1  # an acknowledgement that named no offset (a retry of an old batch)
_VALUE = re.compile(r"^p(\d+)-(\d+)@([^#]+)#(\d+)$")


def encode_value(producer: int, n: int, topic: str, incarnation: int) -> bytes:
    return f"p{producer}-{n}@{topic}#{incarnation}".encode()


@dataclass(frozen=True, slots=True)
class ValueTag:
    """What a value says about itself."""

    producer: int
    n: int
    topic: str
    incarnation: int


def decode_value(value: bytes) -> ValueTag | None:
    """None for bytes no nemesis producer wrote."""
    match = _VALUE.match(value.decode("utf-8", errors="replace"))
    if match is None:
        return None
    return ValueTag(int(match[1]), int(match[2]), match[3], int(match[4]))


@dataclass(frozen=True, slots=True)
class ProduceAttempt:
    producer: int
    n: int
    topic: str
    partition: int
    incarnation: int
    outcome: str
    offset: int | None = None  # the acknowledged offset (ACK only)
    error: str = ""

    @property
    def value(self) -> bytes:
        return encode_value(self.producer, self.n, self.topic, self.incarnation)


@dataclass(frozen=True, slots=True)
class ReadRecord:
    reader: str
    topic: str
    partition: int
    incarnation: int
    offset: int
    value: bytes


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass
class History:
    attempts: list[ProduceAttempt] = field(default_factory=list)
    reads: list[ReadRecord] = field(default_factory=list)
    # Each topic's incarnation when the final read ran (the one it reads).
    final_incarnations: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckCounts:
    """How much the checker looked at (the summary's figures)."""

    acknowledged: int
    acknowledged_checked: int  # acknowledged in a final incarnation: looked for in the read
    reads_checked: int


def check(history: History) -> list[Finding]:
    """Every finding of the history (see the module docstring)."""
    attempts = {(a.producer, a.n): a for a in history.attempts}
    findings: list[Finding] = []
    positions: dict[bytes, set[tuple[str, int, int, int]]] = defaultdict(set)
    held: dict[tuple[str, int, int, int], set[bytes]] = defaultdict(set)
    for read in history.reads:
        finding = _misplaced(read, attempts)
        if finding is not None:
            findings.append(finding)
        place = (read.topic, read.incarnation, read.partition, read.offset)
        positions[read.value].add(place)
        held[place].add(read.value)
    findings += _inconsistent(held)
    findings += _duplicated(positions)
    findings += _lost(history, attempts, positions)
    findings += _skipped(history)
    findings += _out_of_order(history, positions)
    return findings


def counts(history: History) -> CheckCounts:
    acknowledged = [a for a in history.attempts if a.outcome == ACK]
    streams = _read_streams(history)
    checked = [a for a in acknowledged
               if history.final_incarnations.get(a.topic) == a.incarnation
               or _readers_past(streams, a)]
    return CheckCounts(len(acknowledged), len(checked), len(history.reads))


Streams = dict[tuple[str, int, int], dict[str, dict[int, bytes]]]


def _read_streams(history: History) -> Streams:
    """What each consumer read of each partition incarnation: (topic, incarnation,
    partition) -> reader -> offset -> value. A consumer reads an incarnation from its first
    offset on, every record in turn."""
    streams: Streams = defaultdict(lambda: defaultdict(dict))
    for read in history.reads:
        if read.reader != FINAL_READER:
            streams[(read.topic, read.incarnation, read.partition)][read.reader][
                read.offset] = read.value
    return streams


def _readers_past(streams: Streams,
                  attempt: ProduceAttempt) -> list[tuple[str, dict[int, bytes]]]:
    """The consumers that read the attempt's partition incarnation past its acknowledged
    offset (so they must have read it there)."""
    if attempt.outcome != ACK or attempt.offset in (None, UNKNOWN_OFFSET):
        return []
    readers = streams.get((attempt.topic, attempt.incarnation, attempt.partition), {})
    # Offsets are read in turn, so a reader's dict ends with the last offset it read.
    return [(reader, offsets) for reader, offsets in readers.items()
            if next(reversed(offsets)) > attempt.offset]


def _skipped(history: History) -> list[Finding]:
    """An acknowledged record a consumer read past without reading it at its offset (any
    incarnation: the ones deleted since are checked here, the last one by the final read)."""
    streams = _read_streams(history)
    findings = []
    for attempt in history.attempts:
        for reader, offsets in _readers_past(streams, attempt):
            if offsets.get(attempt.offset) != attempt.value:
                found = offsets.get(attempt.offset)
                findings.append(Finding(
                    "lost acknowledged", f"{attempt.value!r} acknowledged at offset "
                    f"{attempt.offset} of {attempt.topic}/{attempt.partition} (incarnation "
                    f"{attempt.incarnation}); {reader} read past it, and read "
                    f"{'nothing' if found is None else repr(found)} there"))
    return findings


def _misplaced(read: ReadRecord, attempts: dict[tuple[int, int], ProduceAttempt]
               ) -> Finding | None:
    where = (f"{read.topic}/{read.partition} offset {read.offset} (incarnation "
             f"{read.incarnation}, read by {read.reader})")
    tag = decode_value(read.value)
    if tag is None:
        return Finding("phantom", f"{where} holds {read.value[:80]!r}, which no producer wrote")
    attempt = attempts.get((tag.producer, tag.n))
    if attempt is None or attempt.value != read.value:
        return Finding("phantom", f"{where} holds {read.value!r}, never sent")
    if (attempt.topic, attempt.partition) != (read.topic, read.partition):
        return Finding("wrong partition", f"{where} holds {read.value!r}, sent to "
                                          f"{attempt.topic}/{attempt.partition}")
    if attempt.incarnation != read.incarnation:
        return Finding("wrong incarnation", f"{where} holds {read.value!r}, sent to "
                                            f"incarnation {attempt.incarnation}")
    if attempt.outcome == FAIL:
        return Finding("stored though not delivered",
                       f"{where} holds {read.value!r}, whose produce the client reported as "
                       f"not delivered ({attempt.error})")
    return None


def _inconsistent(held: dict[tuple[str, int, int, int], set[bytes]]) -> list[Finding]:
    return [Finding("inconsistent read", f"{topic}/{partition} offset {offset} (incarnation "
                                         f"{incarnation}) read as {sorted(values)}")
            for (topic, incarnation, partition, offset), values in held.items()
            if len(values) > 1]


def _duplicated(positions: dict[bytes, set[tuple[str, int, int, int]]]) -> list[Finding]:
    return [Finding("duplicate", f"{value!r} stored at {len(places)} places: "
                                 f"{sorted(places)} (topic, incarnation, partition, offset)")
            for value, places in positions.items() if len(places) > 1]


def _lost(history: History, attempts: dict[tuple[int, int], ProduceAttempt],
          positions: dict[bytes, set[tuple[str, int, int, int]]]) -> list[Finding]:
    final_offsets: dict[bytes, set[int]] = defaultdict(set)
    for read in history.reads:
        if read.reader == FINAL_READER:
            final_offsets[read.value].add(read.offset)
    findings = []
    for attempt in attempts.values():
        if (attempt.outcome != ACK
                or history.final_incarnations.get(attempt.topic) != attempt.incarnation):
            continue
        where = f"{attempt.topic}/{attempt.partition} (incarnation {attempt.incarnation})"
        offsets = final_offsets.get(attempt.value)
        if not offsets:
            seen = sorted(positions.get(attempt.value, ()))
            findings.append(Finding("lost acknowledged", f"{attempt.value!r} acknowledged at "
                                    f"offset {attempt.offset} of {where}, not in the final "
                                    f"read (read during the round at: {seen or 'nowhere'})"))
        elif attempt.offset not in (None, UNKNOWN_OFFSET) and attempt.offset not in offsets:
            findings.append(Finding("moved acknowledged", f"{attempt.value!r} acknowledged at "
                                    f"offset {attempt.offset} of {where}, read at "
                                    f"{sorted(offsets)}"))
    return findings


def _out_of_order(history: History,
                  positions: dict[bytes, set[tuple[str, int, int, int]]]) -> list[Finding]:
    """Per producer, topic, incarnation and partition: its acknowledged records read, by n,
    must have increasing offsets."""
    streams: dict[tuple[int, str, int, int], list[tuple[int, int]]] = defaultdict(list)
    for attempt in history.attempts:
        places = positions.get(attempt.value)
        if attempt.outcome != ACK or not places or len(places) > 1:
            continue  # unread, or a duplicate (reported as such)
        offset = next(iter(places))[3]
        streams[(attempt.producer, attempt.topic, attempt.incarnation,
                 attempt.partition)].append((attempt.n, offset))
    findings = []
    for (producer, topic, incarnation, partition), stream in streams.items():
        stream.sort()
        for (n_before, offset_before), (n_after, offset_after) in zip(stream, stream[1:],
                                                                      strict=False):
            if offset_after <= offset_before:
                findings.append(Finding(
                    "out of order", f"producer {producer} on {topic}/{partition} (incarnation "
                    f"{incarnation}): record {n_before} at offset {offset_before}, its later "
                    f"record {n_after} at {offset_after}"))
    return findings

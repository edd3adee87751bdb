"""The health checkers' history as their logs tell it, read back by the tools that judge them
(the killer's leader lookup, chaos_verify's heal accounting, the e2e tests' ComposeDeployment,
the launcher's report).

Why logs: a checker's status endpoint (healthchecker/status.py, `GET /status`) answers only while
the checker lives, keeps a bounded journal, is signed with the cluster secret and is not
published by a Compose deployment; it names no instance per heartbeat. A killed checker's log
outlives it, and only the log says which instance of a service a checker saw first. So the
history is parsed here, once: callers read it through `checker_history` (one checker's log ->
a CheckerHistory: its last named leader, sightings, restart decisions and restarts) and
`leader_of` (the leader every running checker agrees on), never through the line formats.

The lines (healthchecker/node.py and monitor.py):

    ROLE node=1 role=follower leader=3 | ROLE node=3 role=leader | ROLE node=2 role=electing ...
    RESTART service=broker-1 attempt=1 backoff_s=0 cause=...     the leader decided a restart
    RESTARTED service=broker-1 action=started <detail>            ... and carried it out
    SEEN service=broker-1 instance=<host:pid:nonce>               first heartbeat of an instance
    SEEN service=spark-master probe answered                      first answered probe
    PHASE service=spark-master phase=up previous=starting ...     supervision phase changes

Pure functions over text; where the lines come from (Docker logs, local log files) is the
caller's business. Local checkers stamp lines with the local time of day (`HH:MM:SS.mmm`),
Docker with full timestamps; `local_lines` turns the former into epoch seconds.
Threads: none (pure).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ROLE_LINE = re.compile(r"ROLE node=(\d+) role=(leader|follower|electing)(?: leader=(\d+))?")
RESTARTED_LINE = re.compile(r"RESTARTED service=(\S+) action=(\S+)")
DECISION_LINE = re.compile(r"RESTART service=(\S+) attempt=(\d+)")  # logged before the start
DECISION_CAUSE = re.compile(r"\bcause=(.*)$")  # the rest of a RESTART decision line
SEEN_HEARTBEAT_LINE = re.compile(r"SEEN service=(\S+) instance=(\S+)")
SEEN_PROBE_LINE = re.compile(r"SEEN service=(\S+) probe answered")
PHASE_UP_LINE = re.compile(r"PHASE service=(\S+) phase=up\b")
CHECKER_PREFIX = "healthchecker-"
_LOCAL_STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) (.*)$")
_HALF_DAY_S = 12 * 3600.0
_DAY_S = 24 * 3600.0


@dataclass(frozen=True)
class LogLine:
    at: float  # epoch seconds
    text: str


@dataclass(frozen=True)
class Sighting:
    """A health checker's first evidence that an instance of `service` serves: its first
    heartbeat (`instance` set), or an answered probe / a phase change to up (`instance` "")."""

    at: float
    service: str
    instance: str
    by: str  # the checker whose log says so


@dataclass(frozen=True)
class Restart:
    """A restart a checker carried out (`RESTARTED`)."""

    at: float
    service: str
    action: str
    by: str  # the health checker that logged it


@dataclass(frozen=True)
class RestartDecision:
    """A restart the leader decided (`RESTART`), logged before it is carried out."""

    at: float
    service: str
    cause: str  # "" when the line gives none
    by: str


@dataclass(frozen=True)
class CheckerHistory:
    """One checker's log, read: whom it last named leader (None: never said; "": electing),
    and its sightings, restart decisions and restarts in log order."""

    checker: str
    leader: str | None
    sightings: tuple[Sighting, ...]
    decisions: tuple[RestartDecision, ...]
    restarts: tuple[Restart, ...]


def checker_history(checker: str, lines: Iterable[LogLine]) -> CheckerHistory:
    """Everything the tools read from one checker's log lines (module doc)."""
    lines = list(lines)
    return CheckerHistory(checker, named_leader(line.text for line in lines),
                          tuple(sightings(checker, lines)), tuple(_decisions(checker, lines)),
                          tuple(_restarts(checker, lines)))


def leader_of(histories: Iterable[CheckerHistory]) -> str | None:
    """The checker that every given (running) checker last named as leader (agreed_leader)."""
    return _agreement({history.leader for history in histories})


def checker_name(node_id: str | int) -> str:
    return f"{CHECKER_PREFIX}{node_id}"


def named_leader(lines: Iterable[str]) -> str | None:
    """The leader a checker's last ROLE line names ("" while it is electing), None if it never
    logged one."""
    last = None
    for text in lines:
        match = ROLE_LINE.search(text)
        if match is not None:
            last = match
    if last is None:
        return None
    if last.group(2) == "electing":
        return ""
    return checker_name(last.group(1) if last.group(2) == "leader" else last.group(3))


def agreed_leader(lines_by_checker: Mapping[str, Iterable[str]]) -> str | None:
    """The checker that every given (running) checker last named as leader, or None while they
    disagree, elect, or have not said (a paused leader still claims the role while the others
    elect a successor: no agreement, no leader)."""
    return _agreement({named_leader(lines) for lines in lines_by_checker.values()})


def _agreement(named: set[str | None]) -> str | None:
    if len(named) != 1:
        return None
    leader = named.pop()
    return leader or None


def sightings(checker: str, lines: Iterable[LogLine]) -> list[Sighting]:
    """Every SEEN / PHASE-up line of one checker's log as a Sighting."""
    found = []
    for line in lines:
        match = SEEN_HEARTBEAT_LINE.search(line.text)
        if match is not None:
            found.append(Sighting(line.at, match.group(1), match.group(2), checker))
            continue
        match = SEEN_PROBE_LINE.search(line.text) or PHASE_UP_LINE.search(line.text)
        if match is not None:
            found.append(Sighting(line.at, match.group(1), "", checker))
    return found


def restarted(lines: Iterable[LogLine]) -> list[tuple[float, str]]:
    """(when, service) of every RESTARTED line."""
    return [(restart.at, restart.service) for restart in _restarts("", lines)]


def _restarts(checker: str, lines: Iterable[LogLine]) -> list[Restart]:
    found = []
    for line in lines:
        match = RESTARTED_LINE.search(line.text)
        if match is not None:
            found.append(Restart(line.at, match.group(1), match.group(2), checker))
    return found


def _decisions(checker: str, lines: Iterable[LogLine]) -> list[RestartDecision]:
    found = []
    for line in lines:
        match = DECISION_LINE.search(line.text)
        if match is not None:
            cause = DECISION_CAUSE.search(line.text)
            found.append(RestartDecision(line.at, match.group(1),
                                         cause.group(1) if cause else "", checker))
    return found


def local_time(hours: int, minutes: int, seconds: int, millis: int,
               reference_epoch: float) -> float:
    """The epoch seconds of a local time of day: the day chosen that puts it within half a
    day of `reference_epoch` (a run that crosses midnight keeps its order)."""
    reference = dt.datetime.fromtimestamp(reference_epoch)
    stamped = reference.replace(hour=hours, minute=minutes, second=seconds,
                                microsecond=millis * 1000).timestamp()
    if stamped - reference_epoch > _HALF_DAY_S:
        stamped -= _DAY_S
    elif reference_epoch - stamped > _HALF_DAY_S:
        stamped += _DAY_S
    return stamped


def untimed_lines(text: str) -> list[LogLine]:
    """Every line of a log whose times do not matter (the leader lookup), at time 0."""
    return [LogLine(0.0, raw) for raw in text.splitlines()]


def local_lines(text: str, reference_epoch: float) -> list[LogLine]:
    """The `HH:MM:SS.mmm ...` lines of a local checker's log (others, such as the registry's
    `--- restarted by` notes and tracebacks, are skipped)."""
    lines = []
    for raw in text.splitlines():
        match = _LOCAL_STAMP.match(raw)
        if match is None:
            continue
        hours, minutes, seconds, millis = (int(match.group(i)) for i in range(1, 5))
        lines.append(LogLine(local_time(hours, minutes, seconds, millis, reference_epoch),
                             match.group(5)))
    return lines

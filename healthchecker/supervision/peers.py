"""Supervision across checkers: this node's view as shared records, and a peer's merged in.

Owns: `to_shared` (the bounded snapshot sent to the peers, urgent phases first),
`on_peer_state` (a `PeerState` event) and `merge_record`, the rules by which two nodes' views of
one service become one.

Invariants: the newer restart's bookkeeping wins (within `SAME_RESTART_TOLERANCE_S`, two views
of one restart); a peer's word never revives a service this node saw die, nor kills one it saw
alive itself; the table stays within `SERVICES_MAX`.

Threads: none; pure functions of (state, event, now).
"""

from __future__ import annotations

from dataclasses import replace

from healthchecker.supervision.events import Action, PeerState, transition
from healthchecker.supervision.records import (
    NEVER,
    SAME_RESTART_TOLERANCE_S,
    SERVICES_MAX,
    Phase,
    ServiceRecord,
    SupervisionState,
)
from healthchecker.supervision.shared import (
    SHARED_AGE_S_MAX,
    SHARED_COUNT_MAX,
    SHARED_SERVICES_MAX,
    SharedRecord,
)


def to_shared(state: SupervisionState, now: float) -> tuple[SharedRecord, ...]:
    """This node's view, bounded to `SHARED_SERVICES_MAX` entries (starting and dead first)."""

    def age(at: float | None) -> float | None:
        return None if at is None else min(max(now - at, 0.0), SHARED_AGE_S_MAX)

    urgent = (Phase.STARTING, Phase.DEAD)
    names = sorted(state.records, key=lambda n: (state.records[n].phase not in urgent, n))
    return tuple(
        SharedRecord(
            name=name,
            phase=record.phase,
            since_age_s=age(record.since) or 0.0,
            last_seen_age_s=age(record.last_seen_at),
            restart_count=min(record.restart_count, SHARED_COUNT_MAX),
            flaps=min(record.flaps, SHARED_COUNT_MAX),
            start_misses=min(record.start_misses, SHARED_COUNT_MAX),
            last_restart_age_s=age(record.last_restart_at),
            backoff_left_s=min(max(record.not_before - now, 0.0), SHARED_AGE_S_MAX),
            in_flight=record.phase is Phase.STARTING and (
                record.in_flight or record.peer_in_flight),
        )
        for name, record in ((n, state.records[n]) for n in names[:SHARED_SERVICES_MAX])
    )


def _from_shared(entry: SharedRecord, now: float) -> ServiceRecord:
    def local(age_s: float | None) -> float | None:
        return None if age_s is None else now - age_s

    return ServiceRecord(
        phase=entry.phase,
        since=now - entry.since_age_s,
        last_seen_at=local(entry.last_seen_age_s),
        restart_count=entry.restart_count,
        flaps=entry.flaps,
        start_misses=entry.start_misses,
        last_restart_at=local(entry.last_restart_age_s),
        not_before=now + entry.backoff_left_s if entry.backoff_left_s > 0 else NEVER,
        cause="dead according to a peer" if entry.phase is Phase.DEAD else "",
        peer_in_flight=entry.phase is Phase.STARTING and entry.in_flight,
    )


def on_peer_state(state: SupervisionState, event: PeerState, now: float):
    records = dict(state.records)
    actions: list[Action] = []
    for entry in event.entries:
        if entry.name == state.config.self_name:
            continue
        ours = records.get(entry.name)
        if ours is None and len(records) >= SERVICES_MAX:
            continue
        merged = merge_record(ours, _from_shared(entry, now))
        records[entry.name] = merged
        # A service first known by hearsay is logged too: its heartbeat may come next and
        # change no phase, and this node would never have said what it holds.
        actions += transition(entry.name, ours, merged, f"told by node {event.sender}")
    return replace(state, records=records), actions


def merge_record(ours: ServiceRecord | None, theirs: ServiceRecord) -> ServiceRecord:
    """Our record after learning a peer's view of the same service.

    The newer restart's bookkeeping wins (restart count, flaps, back-off), and its phase too
    (STARTING or DEAD) unless we saw the service alive after it. An UNKNOWN record adopts the
    peer's view; a fresher sighting refreshes an UP record. Peer evidence never revives a
    service we saw die, nor kills one we saw alive ourselves (only one we knew of by hearsay).
    """
    if ours is None:
        return theirs
    newer_restart = theirs.last_restart_at is not None and (
        ours.last_restart_at is None
        or theirs.last_restart_at > ours.last_restart_at + SAME_RESTART_TOLERANCE_S
    )
    merged = ours
    if newer_restart:
        merged = replace(
            ours,
            restart_count=max(ours.restart_count, theirs.restart_count),
            flaps=theirs.flaps,
            start_misses=theirs.start_misses,
            last_restart_at=theirs.last_restart_at,
            not_before=theirs.not_before,
            in_flight=False,
            peer_in_flight=False,
        )
    if ours.phase is Phase.UNKNOWN:
        if theirs.phase is Phase.UNKNOWN:
            return replace(merged, since=min(ours.since, theirs.since))
        return replace(
            theirs,
            restart_count=max(merged.restart_count, theirs.restart_count),
            flaps=merged.flaps,
            start_misses=merged.start_misses,
            last_restart_at=merged.last_restart_at,
            not_before=merged.not_before,
        )
    if newer_restart:
        assert theirs.last_restart_at is not None
        seen_since = ours.last_seen_at is not None and ours.last_seen_at > theirs.last_restart_at
        if not seen_since and theirs.phase in (Phase.STARTING, Phase.DEAD):
            merged = replace(merged, phase=theirs.phase, since=theirs.since,
                             cause=theirs.cause or ours.cause, replaced_instance=ours.instance,
                             peer_in_flight=theirs.peer_in_flight)
        return merged
    if ours.peer_in_flight and not theirs.peer_in_flight and theirs.phase is Phase.STARTING:
        return replace(ours, peer_in_flight=False, since=theirs.since)  # confirmed done
    if ours.phase is Phase.UP and not ours.seen_here and theirs.phase is Phase.DEAD and (
        ours.last_seen_at is None or theirs.since > ours.last_seen_at
    ):
        return replace(merged, phase=Phase.DEAD, since=theirs.since, cause=theirs.cause)
    if ours.phase is Phase.UP and theirs.last_seen_at is not None and (
        ours.last_seen_at is None or theirs.last_seen_at > ours.last_seen_at
    ):
        return replace(ours, last_seen_at=theirs.last_seen_at)
    return merged

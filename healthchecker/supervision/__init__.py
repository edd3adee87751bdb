"""Supervision as a pure state machine: `step(state, event, now) -> (state, actions)`.

The package, by concern (each module states its invariants):

    config      SupervisionConfig, start deadlines, the restart back-off rule
    records     Phase, ServiceRecord, SupervisionState: the table
    events      events in, actions out
    machine     step: the phases of one service, restarts, stalls
    shared      the state shared with the peers and its JSON rows
    peers       this node's view as shared records; a peer's view merged in
    checkpoint  the restart bookkeeping that survives a checker's restart

Callers import from the package (`healthchecker.supervision`), which names the API below.
Threads: none anywhere in the package.

No sockets, threads or clocks here: the heartbeat server and the probes deliver `Seen`,
`Departed` and `Lost` events, a timer delivers `Tick`s, the election delivers `Leadership`, the
restarter reports `RestartDone`, peers deliver `PeerState`; the caller carries out the returned
actions (`Restart`, `ShareState`) and logs the others. `now` is seconds on any monotonic clock.

Phases of one service (every checker tracks them all the time, leader or not):

    UNKNOWN   known (listed by the restarter, restored from a checkpoint, or shared by a peer)
              but never seen by this node; it may be starting, so it is dead when the restarter
              expects it to run and it is still unseen at its start deadline, counted from when
              this node learned of it (peers' states usually tell sooner), or at once when the
              restarter lists it as stopped (it ran and is gone)
    STARTING  (re)started at `since`; UP at its first heartbeat or answered probe; DEAD when it
              misses its start deadline (per service kind, `start_deadline_for`; every missed
              deadline doubles the next one, up to `start_deadline_growth_max` times).
              With `hung_timeout_s` set, the leader inspects it every `hung_timeout_s / 2`
              meanwhile: a frozen start (SIGSTOP, paused) is DEAD at once, not at a JVM's
              deadline minutes later; running or not running yet, it waits on.
              A restart is not confirmed until its `RestartDone`: an instance first seen
              before that may be the one the restart replaces (a start slower than its
              deadline beats once, then the restart kills it), so while it has not beaten
              after the confirmation its loss, goodbye or silence is no death of its own:
              back to STARTING, awaiting the new instance (one restart, not two)
    UP        seen; DEAD when silent for more than `heartbeat_timeout_s`, or at once when its
              heartbeat connection is closed without a goodbye (`Lost`: the process is gone).
              With `hung_timeout_s` set, silence past the heartbeat timeout makes the leader
              ask the restarter (`Inspect` → `Inspected`): a frozen process (SIGSTOP, paused)
              or none at all is DEAD at once; a running one is slow (a loaded machine), DEAD
              only once silent `hung_timeout_s`; no answer within another heartbeat timeout
              is DEAD too
    DEAD      restart due: the leader restarts it as soon as its back-off allows (`not_before`)
    DEPARTED  said goodbye (stopped on purpose): left alone until seen again

Only the leader restarts, and it restarts at once: there is no grace period, neither after a
restart (STARTING covers that) nor after an election (every node already knows who is dead,
and the leader shares its restart bookkeeping with `to_shared`, merged by `PeerState`). A
restart the old leader decided but had not confirmed done when it last spoke may have died
with it: a new leader redoes it at once (`Leadership`).

Back-off: a restart less than `stable_after_s` after the previous one is a flap; the restart
after `n` consecutive flaps waits `backoff_base_s * 2**(n-1)` (capped at `backoff_max_s`) after
the previous restart. The first restart, and the first one after a stable run, wait nothing.

A tick that comes more than `stall_gap_s` after the previous one means this node itself was
frozen (SIGSTOP, starved): every clock in the table is moved forward by the gap, so the node
does not blame the services for its own silence.
"""

from healthchecker.supervision.checkpoint import (
    CHECKPOINT_FORMAT,
    SupervisorCheckpointError,
    from_checkpoint,
    to_checkpoint,
)
from healthchecker.supervision.config import (
    DEFAULT_START_DEADLINES,
    NAME_CHARS_MAX,
    SupervisionConfig,
    SupervisionConfigError,
    backoff_s,
)
from healthchecker.supervision.events import (
    Action,
    Departed,
    Event,
    Expected,
    Inspect,
    Inspected,
    Leadership,
    Lost,
    PeerState,
    Restart,
    RestartDone,
    Seen,
    ShareState,
    Stalled,
    Tick,
    Transition,
)
from healthchecker.supervision.machine import step
from healthchecker.supervision.peers import merge_record, to_shared
from healthchecker.supervision.records import (
    SAME_RESTART_TOLERANCE_S,
    SERVICES_MAX,
    Phase,
    ServiceRecord,
    SupervisionState,
    initial_state,
)
from healthchecker.supervision.shared import (
    SHARED_AGE_S_MAX,
    SHARED_COUNT_MAX,
    SHARED_SERVICES_MAX,
    SharedRecord,
    SharedStateError,
    shared_from_json,
    shared_to_json,
)

__all__ = [
    "CHECKPOINT_FORMAT", "DEFAULT_START_DEADLINES", "NAME_CHARS_MAX", "SAME_RESTART_TOLERANCE_S",
    "SERVICES_MAX", "SHARED_AGE_S_MAX", "SHARED_COUNT_MAX", "SHARED_SERVICES_MAX", "Action",
    "Departed", "Event", "Expected", "Inspect", "Inspected", "Leadership", "Lost", "PeerState",
    "Phase", "Restart",
    "RestartDone", "Seen", "ServiceRecord", "ShareState", "SharedRecord", "SharedStateError",
    "Stalled", "SupervisionConfig", "SupervisionConfigError", "SupervisionState",
    "SupervisorCheckpointError", "Tick", "Transition", "backoff_s", "from_checkpoint",
    "initial_state", "merge_record", "shared_from_json", "shared_to_json", "step",
    "to_checkpoint", "to_shared",
]

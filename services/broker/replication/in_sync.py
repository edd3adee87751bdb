"""In-sync replicas: which replicas of a replication group hold the leader's journal, by Kafka's
rule, as the group's leader sees them. Pure: the leader's Raft state and `now` in, a set out.

The rule (Kafka's replica.lag.time.max.ms): a follower is in sync while it caught up to the
leader's journal end within the last `REPLICA_LAG_TIME_MAX_S`. "Caught up" is the state
machine's `caught_up_s` (raft.py `_note_follower_caught_up`, Kafka's lastCaughtUpTime): a
fetch from the leader's end, or from at least the end the leader had at that follower's
previous fetch. So a
follower that fetches but never gets further (stuck on an entry it cannot take, or outpaced by
the writers) drops out as surely as a dead one, while a healthy follower under load, always a
fetch round trip behind, stays in. The leader is always in sync; learners never are (their
copy counts toward nothing: docs/replication.md, "Learners"); a follower first counts once it
fetched from this leader (a new leader knows nothing of anyone's journal).

Only a leader can say: a follower sees no other follower's fetches, so any broker that does not
lead the group answers `None` (unknown), never a guess.

The bound: Kafka's 30 s suits its failover of tens of seconds. Ours elects in under a second
(election timeouts 0.5-1 s), a caught-up follower fetches every `fetch_wait_ms` (200 ms) and a
lost fetch is retried after `request_timeout_s` (1.5 s). 5 s outlasts two lost rounds and a
second-long pause of a busy two-core machine, so a live follower does not flap out under load,
and still names a dead or stuck one within seconds of its failure -- the same span after which
a follower that makes no progress is reported stalled (follower_progress.py).
"""

from __future__ import annotations

from services.broker.replication.raft import RaftConfig, RaftState, Role

REPLICA_LAG_TIME_MAX_S = 5.0


def in_sync_replicas(config: RaftConfig, state: RaftState, now: float,
                     lag_time_max_s: float = REPLICA_LAG_TIME_MAX_S) -> frozenset[int] | None:
    """The in-sync voters of the group at `now` (the leader's clock, as its state's times), the
    leader included; None when this broker does not lead the group (it cannot know)."""
    assert lag_time_max_s > 0, "an in-sync window needs a positive length"
    if state.role is not Role.LEADER:
        return None
    followers = {peer for peer in config.peers - state.learners
                 if now - state.caught_up_s.get(peer, float("-inf")) <= lag_time_max_s}
    return frozenset({config.node_id, *followers})


def runs_without_healthy_majority(config: RaftConfig, in_sync: frozenset[int]) -> bool:
    """Whether fewer voters than a majority are in sync: one more fault (or the loss of the
    wrong broker) and the group cannot commit."""
    return len(in_sync & config.voters) < config.majority

"""Properties of Raft, checked after every step of simulated clusters (`raft_sim.py`) that
crash, restart with a stale commit index, lose, double, delay and reorder messages, and split
into partitions, while clients write at whoever leads:

- election safety: never two leaders of one epoch; one vote per voter and epoch;
- leader completeness: every committed entry is in the journal of every later leader;
- state machine safety: no two nodes commit different entries at one index;
- log matching: two journals with an entry of one epoch at one index agree up to it;
- no truncation below a node's commit index, nor of a committed entry a node holds;
- an acknowledgement names the entry committed at its index (index and epoch), though
  answers are held while leaders step down, and appends reach the journal before the state
  machine hears of them;
- topics created, deleted and re-created across restarts: the newest incarnation not deleted
  after it is on disk, a deleted one is not;
- compaction: nodes fold their applied prefix into a snapshot at random
  points; a lagging, partitioned or restarted follower behind its leader's snapshot catches up
  by installing it, and every check above still holds;
- liveness: once the network heals and crashes stop, a leader emerges and commits a fresh
  entry on every node.

A soak runs more: `RAFT_SOAK_STEPS=2000000 pytest tests/unit/broker/replication/
test_raft_property.py -k soak -s --timeout=0` (rounds in all; `make soak`; a benchmark, not part
of `make test`: deselected when the variable is unset, tests/conftest.py; `--timeout=0` lifts the
suite's 600 s per-test limit)."""

import dataclasses
import os
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.broker.replication import raft
from tests.unit.broker.replication import raft_sim
from tests.unit.broker.replication.raft_sim import (
    NO_FAULTS,
    PROFILES,
    Faults,
    LivenessFailure,
    SafetyViolation,
    Simulation,
    Stats,
)

FETCH_CAPS = (1, 3, 16)  # entries per fetch answer: one at a time makes Figure 8 likelier
ROUNDS = 1500
# The hard paths need leaders deposed alive (partitions) while answers are held, appends
# land late, and topics come and go.
DEPOSED_LEADERS = Faults(partition=0.03, partition_max_s=4.0, crash=0.002, client_append=0.7,
                  unannounced=0.3, ack_hold=0.3, ack_hold_max_s=8.0, topic_ops=0.2)
# Brokers come back with their data directory wiped, while leaders die and the
# network splits: a wiped broker's forgotten vote or copy would matter.
WIPES = dataclasses.replace(PROFILES["crashy"], wipe=0.5, leader_crash=0.02, partition=0.02)
# Everything at once: wiped directories while nodes compact and leaders are paused (a wiped
# node loses its snapshot too; a learner may have to install a leader's).
WIPES_COMPACTING = dataclasses.replace(WIPES, compact=0.03, leader_pause=0.01)
# Appends announced late and seldom: stale views last.
STALE_VIEWS = dataclasses.replace(DEPOSED_LEADERS, announce=0.02, client_append=0.3)
# Nodes compact often while followers crash and are cut off: they fall behind snapshots.
COMPACTING = dataclasses.replace(DEPOSED_LEADERS, compact=0.03, crash=0.006, down_max_s=6.0)


def _play(ids, seed: int, faults: Faults, rounds: int = ROUNDS,
          fetch_entries_max: int | None = None) -> Simulation:
    """Run a cluster through `rounds` of faults, then heal it and demand progress."""
    cap = fetch_entries_max or FETCH_CAPS[seed % len(FETCH_CAPS)]
    sim = Simulation(ids, seed=seed, faults=faults, fetch_entries_max=cap)
    try:
        sim.run(rounds)
        sim.check_all()
        sim.settle()
        sim.check_liveness()
        sim.check_all()
    except AssertionError as exc:
        raise AssertionError(f"{len(ids)} nodes, seed {seed}, faults {faults}, fetch cap "
                             f"{cap}, round {sim.stats.rounds}: {exc}") from exc
    return sim


def _summary(title: str, stats: Stats, runs: int, seconds: float) -> str:
    return (f"\n{title}: {runs} runs, {stats.rounds} rounds, {stats.steps} steps in "
            f"{seconds:.1f} s; {stats.elections} elections ({stats.candidacies} candidacies, "
            f"{stats.pre_votes} pre-votes, {stats.step_downs} step-downs), "
            f"{stats.committed_entries} entries committed ({stats.commits} commit advances, "
            f"{stats.client_appends} client appends), {stats.truncations} truncations, "
            f"{stats.crashes} crashes ({stats.crashes_mid_step} mid-step), "
            f"{stats.partitions} partitions, {stats.sent} messages: {stats.drops} dropped, "
            f"{stats.duplicates} duplicated, {stats.stale_answers} stale answers unread, "
            f"{stats.lost_after_healing} appends lost after healing; {stats.acks} acks, "
            f"{stats.not_leader_answers} NOT_LEADER, {stats.unannounced_appends} appends "
            f"announced late ({stats.stale_tails} stale tails), {stats.topic_creates} topic "
            f"creates, {stats.topic_deletes} deletes ({stats.deletes_of_older_incarnations} "
            f"of an older incarnation); a lease held in {stats.lease_rounds} rounds; "
            f"{stats.wipes} wipes ({stats.promotions} promotions), {stats.leader_pauses} leader "
            f"pauses, {stats.compactions} compactions ({stats.snapshot_installs} installs), "
            f"{stats.transfers} transfers told ({stats.timeout_nows} TIMEOUT_NOW sent, "
            f"{stats.transfer_wins} won by their target)")


def _campaign(ids, seeds, profile: str, rounds: int = ROUNDS) -> Stats:
    total = Stats()
    started = time.perf_counter()
    for seed in seeds:
        total.add(_play(ids, seed, PROFILES[profile], rounds).stats)
    print(_summary(f"{len(ids)} nodes, {profile}", total, len(seeds),
                   time.perf_counter() - started))
    return total


def test_compaction_paths_are_played_and_checked():
    """Under COMPACTING, nodes compact, leaders answer SNAPSHOT to followers behind
    their snapshot, and those followers install it and catch up -- across crashes, restarts,
    partitions and topic churn, with every check passing (and liveness after healing: every
    node commits a fresh entry, so every follower caught up)."""
    total = Stats()
    started = time.perf_counter()
    for seed in range(8):
        total.add(_play((1, 2, 3), seed, COMPACTING).stats)
    for seed in range(2):
        total.add(_play((1, 2, 3, 4, 5), 50 + seed, COMPACTING).stats)
    print(_summary("compaction", total, 10, time.perf_counter() - started)
          + f"; {total.compactions} compactions, {total.snapshot_answers} SNAPSHOT answers, "
          f"{total.snapshot_installs} installs")
    assert total.compactions >= 300 and total.snapshot_installs >= 20
    assert total.acks >= 500 and total.topic_creates >= 100 and total.restarts >= 10


def test_deposed_leader_paths_are_played_and_checked():
    """The hard scenarios really happen under DEPOSED_LEADERS: appends that land during a
    step and are announced late, leaders deposed alive, held acknowledgements given and
    NOT_LEADER answers, topic deletes and re-creates, across crashes and restarts -- with
    every check passing. (A fetch answered on a stale view, and a committed delete meeting a
    newer incarnation, are rarer than these runs: test_replication_safety.py plays them.)"""
    total = Stats()
    started = time.perf_counter()
    for seed in range(10):
        total.add(_play((1, 2, 3), seed, DEPOSED_LEADERS).stats)
    print(_summary("3 nodes, deposed-leader paths", total, 10, time.perf_counter() - started))
    assert total.unannounced_appends >= 500 and total.step_downs >= 10
    assert total.acks >= 1_000 and total.not_leader_answers >= 50
    assert total.topic_creates >= 200 and total.topic_deletes >= 100
    assert total.restarts >= 10


def test_wiped_brokers_rejoin_as_learners_and_nothing_committed_is_lost():
    """Nodes restart with an empty data directory (epoch, vote, journal, topics
    gone); they rejoin as learners, catch up and vote again -- and every check holds: one
    leader per epoch, one vote per voter and epoch (remembered across the wipe), no committed
    entry lost, acknowledgements naming the committed entry. A learner waits for a leader's
    commit that covers the leader's own epoch, so promotions are slower than wipes used to be:
    30 seeds of 3 nodes reach the counts below."""
    total = Stats()
    started = time.perf_counter()
    for seed in range(30):
        total.add(_play((1, 2, 3), seed, WIPES).stats)
    for seed in range(200, 203):
        total.add(_play((1, 2, 3, 4, 5), seed, WIPES).stats)
    # The soak's seed 10269: a learner promoted on a restarted leader's lagging commit index
    # helped elect a leader without a committed entry at round 1852.
    total.add(_play((1, 2, 3), 10269, WIPES, rounds=2000).stats)
    print(_summary("wiped directories", total, 34, time.perf_counter() - started)
          + f"; {total.wipes} wipes, {total.promotions} promotions")
    assert total.wipes >= 35 and total.promotions >= 30
    assert total.committed_entries >= 500 and total.acks >= 100


# Leaders SIGSTOPped while the others elect a successor: thawed, a
# leader must hold no lease beside its successor's, nor a stale one.
PAUSES = Faults(leader_pause=0.03, leader_pause_max_s=6.0, client_append=0.5)


def _paused_campaign(seeds=range(12)) -> Stats:
    total = Stats()
    started = time.perf_counter()
    for seed in seeds:
        total.add(_play((1, 2, 3), seed, PAUSES).stats)
    print(_summary("3 nodes, leaders paused", total, len(seeds), time.perf_counter() - started)
          + f", {total.leader_pauses} leader pauses")
    return total


def test_wiped_brokers_among_compacting_nodes_start_without_a_snapshot():
    """A wiped directory loses its snapshot with its journal (seed 20006 restarted a wiped node
    with its old snapshot's commit before the simulator cleared it): wiped learners install
    their leader's snapshot or fetch from 0, and every check holds."""
    total = Stats()
    for seed in (20006, 20030, 20246):
        total.add(_play((1, 2, 3), seed, WIPES_COMPACTING, rounds=3000).stats)
    assert total.wipes >= 3 and total.promotions >= 3
    assert total.compactions >= 20 and total.snapshot_installs >= 1


def test_a_paused_leader_never_holds_its_lease_beside_its_successor():
    stats = _paused_campaign()
    assert stats.leader_pauses >= 100 and stats.elections >= 100
    assert stats.lease_rounds >= stats.rounds // 8 and stats.committed_entries >= 1_000


@pytest.mark.parametrize("mutant", ["lease_longer_than_the_vote_refusal",
                                    "fetch_receipt_counts_as_heard"])
def test_lease_mutants_are_caught(monkeypatch, mutant):
    """The lease checks have teeth: a lease of 3 election timeouts (what the config refuses),
    or crediting a fetch when it arrives (the follower may not have read the answer before
    it), give two leases or a stale one."""
    if mutant == "lease_longer_than_the_vote_refusal":
        checked = raft.RaftConfig.__post_init__

        def post_init(config):
            checked(config)
            object.__setattr__(config, "lease_timeout_s", 3 * config.election_timeout_min_s)

        monkeypatch.setattr(raft.RaftConfig, "__post_init__", post_init)
    else:
        on_fetch = raft._HANDLERS[raft.FetchRequest]

        def credited_on_receipt(config, state, event, now, rng, actions):
            event = dataclasses.replace(event, confirmed_s=now)
            return on_fetch(config, state, event, now, rng, actions)

        monkeypatch.setitem(raft._HANDLERS, raft.FetchRequest, credited_on_receipt)
    with pytest.raises(AssertionError, match="two leases|stale read"):
        _paused_campaign()


# Leaders told to hand over while clients write, leaders are paused, nodes crash
# and the network splits: TIMEOUT_NOW answers are lost, doubled and late, targets die or are
# cut off before they stand, and transfer votes reach voters that still hear from the leader.
TRANSFERS = Faults(transfer=0.03, transfer_deadline_max_s=6.0, leader_pause=0.005,
                   leader_pause_max_s=3.0, crash=0.003, partition=0.01, partition_max_s=3.0,
                   client_append=0.6, topic_ops=0.1)

# Hand-overs among wiped directories, compaction, paused leaders and topic churn (the soak).
TRANSFERS_AMID_EVERYTHING = dataclasses.replace(WIPES_COMPACTING, transfer=0.02,
                                                topic_ops=0.1, unannounced=0.2)


def _transfer_campaign(seeds=range(12), faults: Faults = TRANSFERS) -> Stats:
    total = Stats()
    started = time.perf_counter()
    for seed in seeds:
        total.add(_play((1, 2, 3), seed, faults).stats)
    for seed in range(2):
        total.add(_play((1, 2, 3, 4, 5), 300 + seed, faults).stats)
    print(_summary("leadership transfers", total, len(seeds) + 2, time.perf_counter() - started)
          + f"; {total.transfer_candidacies} transfer candidacies")
    return total


def test_leadership_transfers_keep_every_check_and_mostly_elect_the_target():
    stats = _transfer_campaign()
    # Many tells are abandoned at their deadline: a target one entry per fetch behind a busy
    # leader, down or cut off. Those that reach TIMEOUT_NOW mostly elect the target (the rest:
    # the answer lost, the target crashed or cut off before its votes came back).
    assert stats.transfers >= 200 and stats.timeout_nows >= 80
    assert stats.transfer_wins >= 0.75 * stats.timeout_nows
    assert stats.leader_pauses >= 10 and stats.crashes >= 20 and stats.partitions >= 10
    assert stats.lease_rounds >= stats.rounds // 8 and stats.acks >= 1_000


def _transfer_with_the_old_leader_cut_off() -> Simulation:
    """A calm cluster whose leader L holds its lease hands over to T; as T stands, L is cut off
    from both others, so nothing of the new epoch reaches it (T's vote request, F's fetches).
    T wins with the third voter F and takes its lease. Returns the simulation after that."""
    sim = Simulation((1, 2, 3), seed=4, faults=dataclasses.replace(NO_FAULTS,
                                                                  client_append=0.3))
    sim.run_for(5.0)
    old = sim.current_leader()
    assert old is not None and raft.holds_lease(sim.nodes[old].config, sim.nodes[old].state,
                                                sim.now)
    target = min(set(sim.ids) - {old})
    sim.transfer(old, target, deadline_s=sim.now + 5.0)
    epoch = sim.nodes[old].state.epoch
    while sim.nodes[target].state.epoch == epoch:
        assert sim.now < 20.0, "the target never stood"
        sim.round()
    assert sim.stats.timeout_nows == 1 and sim.stats.transfer_candidacies == 1
    sim.cut.update(frozenset((old, peer)) for peer in set(sim.ids) - {old})
    sim.cut_until = float("inf")
    new = sim.nodes[target]
    while not raft.holds_lease(new.config, new.state, sim.now):
        assert sim.now < 30.0, "the target never held a lease"
        sim.round()
    assert new.state.role is raft.Role.LEADER and new.state.epoch == epoch + 1
    sim.run_for(2.0)
    return sim


def test_a_transfer_whose_old_leader_hears_nothing_of_it_leaves_one_lease():
    sim = _transfer_with_the_old_leader_cut_off()
    assert sim.stats.transfer_wins == 1 and sim.stats.lease_rounds > 0


def test_a_leader_that_keeps_its_lease_and_leads_on_after_timeout_now_is_caught(monkeypatch):
    """The checks have teeth for transfers. Two rules keep a handing-over leader from answering
    beside its successor: it gives up its lease when told, and it steps down when it sends
    TIMEOUT_NOW. With both left out, the old leader -- cut off, so nothing of the new epoch
    deposes it -- still holds the lease its followers' last confirmations gave it when the
    target, elected on a transfer vote that the third voter granted while it heard from the
    old leader, takes its own."""
    stepped_down, lease_end = raft._step_down, raft.lease_end_s

    def no_step_down(config, state, now, rng):
        if state.transfer_to is not None:
            return state
        return stepped_down(config, state, now, rng)

    def lease_kept(config, state):
        return lease_end(config, dataclasses.replace(state, transfer_to=None))

    monkeypatch.setattr(raft, "_step_down", no_step_down)
    monkeypatch.setattr(raft, "lease_end_s", lease_kept)
    monkeypatch.setattr(raft_sim, "holds_lease",
                        lambda config, state, now: now < lease_kept(config, state))
    with pytest.raises(SafetyViolation, match="two leases"):
        _transfer_with_the_old_leader_cut_off()


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_three_nodes_stay_safe_and_recover(profile):
    stats = _campaign((1, 2, 3), range(14), profile)
    assert stats.steps > 50_000
    assert stats.elections >= 80 and stats.crashes >= 60 and stats.drops >= 500
    assert stats.committed_entries >= 1_000 and stats.truncations >= 5
    assert stats.lease_rounds >= 50, "the lease checks must not be vacuous"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_five_nodes_stay_safe_and_recover(profile):
    stats = _campaign((1, 2, 3, 4, 5), range(100, 104), profile)
    assert stats.elections >= 15 and stats.crashes >= 30 and stats.committed_entries >= 100


def test_even_and_single_node_clusters():
    for ids in [(1,), (1, 2), (1, 2, 3, 4)]:
        for seed in range(2):
            sim = _play(ids, seed, PROFILES["crashy"], rounds=800)
            assert sim.stats.elections >= 2 and sim.committed


def test_without_faults_one_leader_commits_everything_everywhere():
    for seed in range(5):
        sim = Simulation((1, 2, 3), seed=seed, faults=dataclasses.replace(
            NO_FAULTS, client_append=0.5))
        sim.run(400)
        leaders = set(sim.leader_of_epoch.values())
        assert len(leaders) == 1, f"seed {seed}: leaders {sim.leader_of_epoch}"
        (leader,) = leaders
        sim.faults = NO_FAULTS
        sim.run_for(2.0)
        end = len(sim.nodes[leader].journal)
        assert end > 100
        for node in sim.nodes.values():
            assert node.journal == sim.nodes[leader].journal
            assert node.state.commit == end


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    five=st.booleans(),
    fetch_cap=st.sampled_from([1, 2, 4, 16]),
    drop=st.floats(0.0, 0.4),
    duplicate=st.floats(0.0, 0.2),
    long_delay=st.floats(0.0, 0.1),
    crash=st.floats(0.0, 0.02),
    leader_crash=st.floats(0.0, 0.03),
    crash_mid_step=st.floats(0.0, 0.01),
    partition=st.floats(0.0, 0.03),
    client_append=st.floats(0.05, 0.9),
    dt_max_s=st.floats(0.02, 0.3),
    compact=st.floats(0.0, 0.05),
)
# A leader crashed mid-step right after carrying out a CommitAdvanced that applied a topic
# delete; it restarted with that commit (its applied index) which the checker had not seen.
@example(seed=17800, five=True, fetch_cap=16, drop=0.09765625, duplicate=0.171875,
         long_delay=0.0078125, crash=0.00390625, leader_crash=0.0,
         crash_mid_step=0.0009521136959203783, partition=0.0, client_append=0.59375,
         dt_max_s=0.04337036367031817, compact=0.0)
# A follower installed a leader's snapshot of 13 entries (durable as its applied index) and
# crashed in the same step, before the CommitAdvanced reached the checks: it restarted with
# commit 13 where they had seen 7. The checks now see a snapshot committed as it lands.
@example(seed=2111, five=False, fetch_cap=4, drop=0.1875, duplicate=0.1484375,
         long_delay=0.0546875, crash=0.015625, leader_crash=0.0234375,
         crash_mid_step=0.009765625, partition=0.01953125, client_append=0.4140625,
         dt_max_s=0.267578125, compact=0.046875)
def test_any_mix_of_faults(seed, five, fetch_cap, drop, duplicate, long_delay, crash,
                           leader_crash, crash_mid_step, partition, client_append, dt_max_s,
                           compact):
    faults = Faults(drop=drop, duplicate=duplicate, long_delay=long_delay, crash=crash,
                    leader_crash=leader_crash, crash_mid_step=crash_mid_step,
                    partition=partition, client_append=client_append, dt_max_s=dt_max_s,
                    compact=compact)
    ids = (1, 2, 3, 4, 5) if five else (1, 2, 3)
    _play(ids, seed, faults, rounds=500, fetch_entries_max=fetch_cap)


# --- the checks have teeth: broken rules are caught ----------------------------------------


def _commit_rule(rank_shift: int = 0, own_epoch_only: bool = True):
    """`_advance_leader_commit`, optionally broken: counting a minority, or entries of older
    epochs (Figure 8)."""

    def advance(config, state, actions):
        ends = sorted([state.log.end, *(state.match.get(p, 0) for p in config.peers)],
                      reverse=True)
        candidate = ends[max(0, config.majority - 1 - rank_shift)]
        if candidate > state.commit and (candidate > state.epoch_start or not own_epoch_only):
            actions.append(raft.CommitAdvanced(candidate))
            return dataclasses.replace(state, commit=candidate)
        return state

    return advance


def _votes_ignore_completeness(monkeypatch):
    original = raft._HANDLERS[raft.VoteRequest]

    def handler(config, state, event, now, rng, actions):
        event = dataclasses.replace(event, last_epoch=10**9, end=10**9)
        return original(config, state, event, now, rng, actions)

    monkeypatch.setitem(raft._HANDLERS, raft.VoteRequest, handler)


def _truncate_to_own_end_only(monkeypatch):
    original = raft._HANDLERS[raft.FetchAnswered]

    def handler(config, state, event, now, rng, actions):
        state = original(config, state, event, now, rng, actions)
        own_end = state.log.end_of_epoch(event.diverging_epoch)[1]
        actions[:] = [raft.Truncate(own_end) if isinstance(a, raft.Truncate) else a
                      for a in actions]
        return state

    monkeypatch.setitem(raft._HANDLERS, raft.FetchAnswered, handler)


def _stale_view_and_commit_by_journal_end(monkeypatch):
    """The old rules of commit: the state machine steps on a view without the appends it was not
    told of, and a follower's commit is bounded by its journal end, not the matched end."""
    original = raft._HANDLERS[raft.LogChanged]

    def handler(config, state, event, now, rng, actions):
        if event.leader_commit is not None:
            event = dataclasses.replace(event, matched_end=event.log.end)
        return original(config, state, event, now, rng, actions)

    monkeypatch.setitem(raft._HANDLERS, raft.LogChanged, handler)
    monkeypatch.setattr(raft_sim.Simulation, "view_rule", "stale")


def _entries_below_the_snapshot(monkeypatch):
    """A leader that ignores its snapshot: it answers ENTRIES where the entries are gone."""
    original = raft._HANDLERS[raft.FetchRequest]

    def handler(config, state, event, now, rng, actions):
        state = original(config, state, event, now, rng, actions)
        actions[:] = [dataclasses.replace(a, outcome=raft.Outcome.ENTRIES)
                      if isinstance(a, raft.AnswerFetch) and a.outcome is raft.Outcome.SNAPSHOT
                      else a for a in actions]
        return state

    monkeypatch.setitem(raft._HANDLERS, raft.FetchRequest, handler)


# Figure 8 needs a leader to die right after it replicated an older epoch's entry.
FIGURE_8 = dataclasses.replace(PROFILES["crashy"], leader_crash=0.03, partition=0.03)

MUTANTS = {
    "figure 8: commit counts older epochs": (
        lambda mp: mp.setattr(raft, "_advance_leader_commit", _commit_rule(0, False)),
        FIGURE_8, SafetyViolation),
    "commit by a minority": (
        lambda mp: mp.setattr(raft, "_advance_leader_commit", _commit_rule(1)),
        PROFILES["default"], SafetyViolation),
    "votes ignore completeness": (_votes_ignore_completeness, PROFILES["default"],
                                  SafetyViolation),
    "follower truncates to its own end of the epoch only": (
        _truncate_to_own_end_only, PROFILES["default"], LivenessFailure),
    "steps on a stale view, follower commit by its journal end": (
        _stale_view_and_commit_by_journal_end, STALE_VIEWS, SafetyViolation),
    "acknowledged by index, not by entry": (
        lambda mp: mp.setattr(raft_sim.Simulation, "ack_rule", "index"), DEPOSED_LEADERS,
        SafetyViolation),
    "restart applies deletes again by name": (
        lambda mp: mp.setattr(raft_sim.Simulation, "apply_rule", "replay"), DEPOSED_LEADERS,
        SafetyViolation),
    "a wiped broker votes at once, as before learners": (
        lambda mp: mp.setattr(raft_sim.Simulation, "wipe_rule", "voter"), WIPES,
        SafetyViolation),
    "a follower's create keeps an older topic": (
        lambda mp: mp.setattr(raft_sim.Simulation, "create_rule", "keep"), DEPOSED_LEADERS,
        SafetyViolation),
    "a leader answers entries below its snapshot": (
        _entries_below_the_snapshot, COMPACTING, SafetyViolation),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_broken_rules_are_caught(name, monkeypatch):
    breaks, faults, expected = MUTANTS[name]
    breaks(monkeypatch)
    for seed in range(40):
        try:
            _play((1, 2, 3), seed, faults, rounds=ROUNDS)
        except AssertionError as exc:
            assert isinstance(exc.__cause__, expected), exc
            return
    pytest.fail(f"{name}: not caught in 40 runs")


# --- soak ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.soak
def test_soak():
    budget = int(os.environ["RAFT_SOAK_STEPS"])
    total = Stats()
    started = time.perf_counter()
    seed = 10_000
    runs = 0
    # Every targeted profile above, beside the generic ones.
    rotation = [PROFILES[name] for name in sorted(PROFILES)] + [
        DEPOSED_LEADERS, COMPACTING, WIPES, PAUSES, STALE_VIEWS, WIPES_COMPACTING, TRANSFERS,
        TRANSFERS_AMID_EVERYTHING]
    while total.rounds < budget:
        ids = (1, 2, 3, 4, 5) if seed % 4 == 0 else (1, 2, 3)
        total.add(_play(ids, seed, rotation[seed % len(rotation)], rounds=5000).stats)
        seed += 1
        runs += 1
    print(_summary("soak", total, runs, time.perf_counter() - started))

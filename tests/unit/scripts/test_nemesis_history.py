"""The nemesis's history checker on hand-made histories: a clean one passes, and each kind of
wrong history is flagged (a lost acknowledged record, a duplicate, an out-of-order read, a
record read in the wrong incarnation, ...); and the fault schedule is a pure function of its
seed that keeps a majority of brokers free of faults."""

from __future__ import annotations

from scripts.nemesis import schedule
from scripts.nemesis.history import (
    ACK,
    FAIL,
    FINAL_READER,
    MAYBE,
    History,
    ProduceAttempt,
    ReadRecord,
    check,
    counts,
    encode_value,
)

TOPIC = "nemesis-0"


def acked(producer: int, n: int, offset: int, incarnation: int = 1,
          partition: int = 0) -> ProduceAttempt:
    return ProduceAttempt(producer, n, TOPIC, partition, incarnation, ACK, offset)


def final(attempt: ProduceAttempt, offset: int, incarnation: int | None = None,
          reader: str = FINAL_READER) -> ReadRecord:
    return ReadRecord(reader, attempt.topic, attempt.partition,
                      attempt.incarnation if incarnation is None else incarnation, offset,
                      attempt.value)


def clean_history() -> History:
    """Two producers on one partition, a maybe-delivered record stored once, a record of an
    earlier incarnation read during the round, all read back."""
    old = acked(0, 0, 0, incarnation=1)
    first, second, third = acked(0, 1, 0, 2), acked(1, 0, 1, 2), acked(0, 2, 3, 2)
    maybe = ProduceAttempt(1, 1, TOPIC, 0, 2, MAYBE, error="RequestTimedOutError")
    failed = ProduceAttempt(1, 2, TOPIC, 0, 2, FAIL, error="NotEnoughReplicasError")
    reads = [final(old, 0, reader="consumer-0"), final(first, 0, reader="consumer-0"),
             final(first, 0), final(second, 1), final(maybe, 2), final(third, 3)]
    return History([old, first, second, third, maybe, failed], reads, {TOPIC: 2})


def kinds(history: History) -> list[str]:
    return sorted(finding.kind for finding in check(history))


def test_a_clean_history_has_no_finding_and_is_counted():
    history = clean_history()
    assert check(history) == []
    figures = counts(history)
    assert (figures.acknowledged, figures.acknowledged_checked, figures.reads_checked) \
        == (4, 3, 6)


def test_a_lost_acknowledged_record_is_flagged():
    history = clean_history()
    history.reads = [read for read in history.reads
                     if not (read.reader == FINAL_READER and read.offset == 1)]
    findings = check(history)
    assert [f.kind for f in findings] == ["lost acknowledged"]
    assert "p1-0@nemesis-0#2" in findings[0].detail


def test_an_acknowledged_record_of_an_earlier_incarnation_is_not_required_unread():
    history = clean_history()
    history.reads = [read for read in history.reads if read.incarnation == 2]
    assert check(history) == []


def test_an_acknowledged_record_a_consumer_read_past_is_flagged_in_any_incarnation():
    """Incarnation 1 (deleted since): consumer-0 read offsets 0 and 2, not the record
    acknowledged at 1."""
    history = clean_history()
    skipped, after = acked(0, 3, 1, incarnation=1), acked(1, 3, 2, incarnation=1)
    history.attempts += [skipped, after]
    history.reads.append(final(after, 2, reader="consumer-0"))
    findings = check(history)
    assert [f.kind for f in findings] == ["lost acknowledged"]
    assert "p0-3@nemesis-0#1" in findings[0].detail and "consumer-0" in findings[0].detail
    # Counted as checked: the old incarnation's records a consumer read past, and the last one's.
    assert counts(history).acknowledged_checked == 3 + 2


def test_a_duplicate_is_flagged_acknowledged_or_not():
    history = clean_history()
    second = history.attempts[2]
    history.reads.append(final(second, 4))
    assert kinds(history) == ["duplicate"]
    history = clean_history()
    maybe = history.attempts[4]
    history.reads.append(final(maybe, 4))
    assert kinds(history) == ["duplicate"]


def test_an_out_of_order_read_is_flagged():
    """Producer 0's records 1 and 2 read at offsets 3 and 0: stored against its order."""
    history = clean_history()
    first, third = history.attempts[1], history.attempts[3]
    history.attempts[1] = acked(0, 1, 3, 2)
    history.attempts[3] = acked(0, 2, 0, 2)
    history.reads = [final(history.attempts[1], 3) if r.value == first.value
                     else final(history.attempts[3], 0) if r.value == third.value else r
                     for r in history.reads]
    assert kinds(history) == ["out of order"]


def test_a_record_read_in_the_wrong_incarnation_is_flagged():
    history = clean_history()
    old = history.attempts[0]
    history.reads.append(final(old, 5, incarnation=2, reader="consumer-1"))
    found = kinds(history)
    assert "wrong incarnation" in found


def test_a_record_the_client_said_was_not_delivered_is_flagged_when_read():
    history = clean_history()
    history.reads.append(final(history.attempts[5], 4))
    assert kinds(history) == ["stored though not delivered"]


def test_an_acknowledged_record_at_another_offset_is_flagged():
    history = clean_history()
    history.attempts[2] = acked(1, 0, 7, 2)
    assert kinds(history) == ["moved acknowledged"]


def test_one_offset_read_with_two_values_and_a_phantom_are_flagged():
    history = clean_history()
    history.reads.append(ReadRecord("consumer-0", TOPIC, 0, 2, 1,
                                    encode_value(7, 0, TOPIC, 2)))
    assert kinds(history) == ["inconsistent read", "phantom"]


def test_a_record_in_the_wrong_partition_is_flagged():
    history = clean_history()
    third = history.attempts[3]
    history.reads.append(ReadRecord("consumer-1", TOPIC, 1, 2, 0, third.value))
    assert "wrong partition" in kinds(history)


# -- the schedule ----------------------------------------------------------------------------

PLAN = schedule.SchedulePlan(600.0, 3, ("a", "b"), fault_interval_s=2.0)


def test_the_schedule_is_a_function_of_its_seed():
    assert schedule.plan_faults(PLAN, 7) == schedule.plan_faults(PLAN, 7)
    assert schedule.plan_faults(PLAN, 7) != schedule.plan_faults(PLAN, 8)


def test_the_schedule_keeps_a_majority_free_and_ends_every_fault_in_time():
    for plan in (PLAN, schedule.SchedulePlan(600.0, 5, ("a",), fault_interval_s=1.0)):
        faults = schedule.plan_faults(plan, 3)
        counted = schedule.count_by_kind(faults)
        assert all(counted[kind] > 0 for kind in schedule.KIND_WEIGHTS), counted
        broker_faults = [f for f in faults if f.kind in schedule.BROKER_KINDS]
        for fault in broker_faults:
            assert fault.end_s <= plan.seconds
            active = [other for other in broker_faults
                      if other.at_s <= fault.at_s < other.end_s]
            assert len(active) <= (plan.brokers - 1) // 2, active
            targets = [b for other in active for b in other.brokers]
            assert len(targets) == len(set(targets)), active
        paused = [f for f in faults if f.kind == schedule.PAUSE]
        churned_in_pause = [p for p in paused if any(
            f.kind == schedule.CHURN and p.at_s < f.at_s < p.end_s for f in faults)]
        assert churned_in_pause, "no topic churned while a broker was paused"


def test_every_broker_fault_is_undone_by_an_action_after_it():
    faults = schedule.plan_faults(PLAN, 11)
    actions = schedule.actions_of(faults)
    assert [a.at_s for a in actions] == sorted(a.at_s for a in actions)
    undo = {"kill": "restart", "wipe": "restart", "pause": "resume", "cut": "heal"}
    for i, action in enumerate(actions):
        if action.verb in undo:
            assert any(later.verb == undo[action.verb] and later.brokers == action.brokers
                       for later in actions[i + 1:]), action

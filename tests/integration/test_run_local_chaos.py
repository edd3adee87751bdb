"""`run_local --chaos-interval-s 3 --chaos-victims round-robin --chaos-pause-ratio 0.3` on 200k
generated rows: the service kinds are hit in turn, the client and the health-checker leader
first, then a broker, the query service and a follower checker, with SIGKILLs and pauses
(SIGSTOP); every fault is healed (a new pid after it) and the results stay exact."""

import re
from collections import defaultdict

import pytest

from healthchecker.local_registry import LocalServiceRegistry
from scripts.faults.victims import LEADER_KIND, fault_kind
from tests.integration.run_local_helpers import (
    assert_results_match_reference,
    run_run_local,
    summary_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# "[chaos] 12:00:01 PAUSE t=3.0s service=healthchecker-2 pid=4242 how=SIGSTOP leader"
FAULT_LINE = re.compile(r"(KILL|PAUSE) t=\S+ service=(\S+) pid=(\d+)(?: how=\S+)?( leader)?")
# The pauses draw from their own seeded stream (killer.chaos): with seed 14 the first faults
# go pause, pause, kill, pause, kill, whoever they hit.
CHAOS_SEED = "14"
# Every kind the local platform has (no Spark daemons: the query service runs local[2]).
KINDS_CLAIMED = {"client", LEADER_KIND, "broker", "query-service", "healthchecker"}
RUN_TIMEOUT_S = 900
ROWS = 200_000
# The upload's ceiling makes it last at least ROWS / 8000 = 25 s on any machine (longer on a
# slow one), while the round-robin schedule has hit every kind after len(KINDS_CLAIMED) * 3 s
# = 15 s: every fault lands while the session is in flight (run_local runs its chaos loop only
# between the client's start and the sessions' end).
UPLOAD_ROWS_PER_S_MAX = 8000


def test_chaos_run_hits_every_kind_heals_every_fault_and_results_stay_exact(tmp_path):
    results = tmp_path / "results"
    code, output = run_run_local(results, tmp_path / "out.txt", RUN_TIMEOUT_S,
                                 "--rows", str(ROWS), "--chaos-interval-s", "3",
                                 "--client-upload-rows-per-s-max", str(UPLOAD_ROWS_PER_S_MAX),
                                 "--chaos-duration-s", "60", "--chaos-seed", CHAOS_SEED,
                                 "--chaos-victims", "round-robin",
                                 "--chaos-pause-ratio", "0.3")
    assert code == 0, output[-5000:]
    sample = results / "sample"
    assert_results_match_reference(results, sample / "itineraries.csv", sample / "airports.csv")
    summary = summary_of(results)
    assert summary["status"] == "completed"
    # The first fault hit the client mid-upload: the session completed by resuming.
    assert summary["resumed"], summary

    faults = [(action, name, int(pid), bool(leader))
              for action, name, pid, leader in FAULT_LINE.findall(output)]
    assert len(faults) >= len(KINDS_CLAIMED), output[-5000:]
    assert {action for action, *_ in faults} == {"KILL", "PAUSE"}, faults
    registry = LocalServiceRegistry(results / "run" / "registry")
    # run_local waits for every fault to heal before it stops the platform: the last one too.
    assert _unhealed(faults, registry) == [], faults
    assert {_kind(fault) for fault in faults} >= KINDS_CLAIMED, faults


def _kind(fault) -> str:
    _action, name, _pid, leader = fault
    return fault_kind(name, name if leader else None)


def _unhealed(faults, registry: LocalServiceRegistry) -> list[int]:
    """Indexes of the faults after which no other pid of the same service appears, neither in a
    later fault nor in the registry's final pid file: nothing replaced the instance hit. (A
    pause followed by a kill of the same paused instance is healed by the one replacement.)"""
    later_pids = defaultdict(list)
    for index, (_action, name, pid, _leader) in enumerate(faults):
        later_pids[name].append((index, pid))
    unhealed = []
    for index, (_action, name, pid, _leader) in enumerate(faults):
        record = registry.read_pid(name)
        after = [p for i, p in later_pids[name] if i > index]
        after += [record.pid] if record is not None else []
        if all(p == pid for p in after):
            unhealed.append(index)
    return unhealed

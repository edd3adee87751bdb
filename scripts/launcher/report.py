"""What a run prints about itself at its end: each session's outcome and timings, kills and
restarts, where things are (the clients' lines as they come: log_tail.py)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from scripts.faults.checker_logs import checker_history, untimed_lines
from scripts.launcher import console
from scripts.launcher.layout import CHECKER_PREFIX, RunLayout

if TYPE_CHECKING:
    from scripts.launcher.chaos import ChaosThread
    from scripts.launcher.sessions import ClientRun

def restarts_in_logs(layout: RunLayout) -> Counter:
    """Service name → restarts the health checkers logged (`RESTARTED service=...`)."""
    restarts: Counter = Counter()
    for path in sorted(layout.logs_dir.glob(f"{CHECKER_PREFIX}*.log")):
        history = checker_history(path.stem, untimed_lines(path.read_text(errors="replace")))
        restarts.update(restart.service for restart in history.restarts)
    return restarts


def describe_session(run: ClientRun) -> list[str]:
    summary = run.summary
    if run.outcome != "completed":
        return [f"  {run.name}: {run.outcome}: {summary.get('error') or ''}".rstrip()]
    sent = summary["rows_sent"]
    rejected = sum(n for kinds in summary["rows_rejected"].values() for n in kinds.values())
    invalid = summary["rows_invalid_for_queries"].get("q4", {})
    rows = ", ".join(f"{q} {n:,}" for q, n in summary["rows_per_query"].items())
    return [
        f"  {run.name}: {sent.get('flights', 0):,} flights and {sent.get('airports', 0):,} "
        f"airports sent, {rejected:,} rows rejected by the reader, "
        f"{sum(invalid.values()):,} invalid for the queries",
        f"    results: {rows}",
        f"    {describe_timings(summary)}",
        f"    files: {run.results_dir}/q1.csv ... q4.csv, summary.json, report.html",
    ]


def describe_timings(summary: dict) -> str:
    timings = summary["timings_s"]
    phases = [f"{label} {timings[key]:.1f} s" for key, label in (
        ("upload", "upload"), ("results_wait", "query (upload end to last result)"),
        ("total", "total")) if key in timings]
    resumed = " (a resumed client: earlier instances did the rest)" if summary["resumed"] else ""
    return f"the client's last run: {', '.join(phases)}{resumed}"


def print_report(runs: list[ClientRun], layout: RunLayout, chaos: ChaosThread | None,
                 unhealed: list, sessions_s: float, total_s: float) -> int:
    """Prints the run's outcome; the exit status: 0 only if every session completed and no
    chaos fault (`unhealed`: killer.Fault) was left unhealed."""
    completed = sum(run.outcome == "completed" for run in runs)
    console.say(f"\n{completed} of {len(runs)} sessions completed; sessions took "
                f"{sessions_s:.1f} s, the whole run {total_s:.1f} s")
    for run in runs:
        for line in describe_session(run):
            console.say(line)
    if chaos is not None:
        faults = Counter(f"{fault.action.lower()} {fault.name}" for fault in chaos.faults)
        restarts = restarts_in_logs(layout)
        console.say(f"chaos: {len(chaos.faults)} faults {dict(sorted(faults.items()))}; "
                    f"health-checker restarts {dict(sorted(restarts.items()))}")
        for fault in unhealed:
            console.say(f"UNHEALED: {fault.action} t={fault.at_s:.1f}s service={fault.name} "
                        f"{fault.detail}: the instance hit was never replaced")
        console.say(f"chaos: {len(chaos.faults) - len(unhealed)} of {len(chaos.faults)} faults "
                    "healed (the instance hit replaced)")
    console.say(f"logs: {layout.logs_dir}")
    return 0 if completed == len(runs) and not unhealed else 1

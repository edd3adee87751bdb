"""chaos_verify's report, as Markdown tables (they paste into the README and issue notes):
one row per round, one row per service kind over every round, and each round's faults."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scripts.faults.chaos import ACTION_KILL
from scripts.faults.victims import KIND_ORDER
from scripts.verify.heal import Heal, HealStats, heal_stats

if TYPE_CHECKING:
    from scripts.verify.rounds import RoundResult


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def median_max(median_s: float | None, max_s: float | None) -> str:
    return f"{seconds(median_s)} / {seconds(max_s)}"


def faults_per_service(heals: Sequence[Heal]) -> str:
    """`broker-1 2k1p, client-1 1k`: kills (k) and pauses (p) per service, by name."""
    kills = Counter(h.fault.name for h in heals if h.fault.action == ACTION_KILL)
    pauses = Counter(h.fault.name for h in heals if h.fault.action != ACTION_KILL)
    parts = []
    for name in sorted(kills.keys() | pauses.keys()):
        counts = (f"{kills[name]}k" if kills[name] else "") + (
            f"{pauses[name]}p" if pauses[name] else "")
        parts.append(f"{name} {counts}")
    return ", ".join(parts) or "none"


def round_table(results: Sequence[RoundResult]) -> list[str]:
    lines = ["| round | kills | pauses | kills and pauses per service | restarts seen "
             "| fault→running median / max s | fault→serving median / max s | unhealed "
             "| session s | exact |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        stats = heal_stats(result.heals)
        exact = "yes" if result.exact else "NO"
        lines.append(
            f"| {result.number} | {stats.kills} | {stats.pauses} "
            f"| {faults_per_service(result.heals)} | {result.restarts} "
            f"| {median_max(stats.running_median_s, stats.running_max_s)} "
            f"| {median_max(stats.serving_median_s, stats.serving_max_s)} "
            f"| {stats.unhealed} | {seconds(result.session_s)} | {exact} |")
    return lines


def kinds_in_order(kinds: set[str]) -> list[str]:
    listed = [kind for kind in KIND_ORDER if kind in kinds]
    return listed + sorted(kinds - set(listed))


def kind_stats(results: Sequence[RoundResult]) -> dict[str, HealStats]:
    """Heal statistics per service kind (the leader apart) over every round."""
    by_kind: dict[str, list[Heal]] = {}
    for result in results:
        for heal in result.heals:
            by_kind.setdefault(heal.kind, []).append(heal)
    return {kind: heal_stats(by_kind[kind]) for kind in kinds_in_order(set(by_kind))}


def kind_table(results: Sequence[RoundResult]) -> list[str]:
    lines = ["| service kind | faults | kills | pauses | unhealed "
             "| fault→running median / max s | fault→serving median / max s |",
             "|---|---|---|---|---|---|---|"]
    for kind, stats in kind_stats(results).items():
        lines.append(
            f"| {kind} | {stats.faults} | {stats.kills} | {stats.pauses} | {stats.unhealed} "
            f"| {median_max(stats.running_median_s, stats.running_max_s)} "
            f"| {median_max(stats.serving_median_s, stats.serving_max_s)} |")
    return lines


def fault_lines(heals: Sequence[Heal]) -> list[str]:
    """One line per fault: when (since the chaos started), what, and how it healed."""
    lines = []
    for heal in heals:
        fault = heal.fault
        leader = " (leader)" if fault.leader else ""
        shared = f", healed together with {heal.shared} later fault(s)" if heal.shared else ""
        outcome = (f"running {seconds(heal.running_s)} s, serving {seconds(heal.serving_s)} s"
                   if heal.healed else
                   f"NOT HEALED (running {seconds(heal.running_s)} s, serving "
                   f"{seconds(heal.serving_s)} s)")
        lines.append(f"  t={fault.at_s:6.1f}s {fault.action:<5} {fault.name}{leader}: "
                     f"{outcome}{shared}")
    return lines

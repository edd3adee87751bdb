"""Writes docs/cli.md, the command and flag reference, from the parsers themselves.

    python -m scripts.cli_reference            # rewrite docs/cli.md
    python -m scripts.cli_reference --check    # exit 1, with a diff, when docs/cli.md is stale

Every entry point in ENTRY_POINTS is run with `--help` in its own subprocess (in parallel), with
COLUMNS=100 and `sys.argv[0]` set to `python -m <module>`, so the text does not depend on the
terminal or on how a parser names its program. The Makefile's targets come with the `#:` line
written right above each rule. tests/unit/scripts/test_cli_reference.py keeps docs/cli.md in step:
a flag added, renamed or removed fails it until `make docs` is run.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CLI_DOC_PATH = REPO_ROOT / "docs" / "cli.md"
MAKEFILE_PATH = REPO_ROOT / "Makefile"
HELP_COLUMNS = 100
HELP_TIMEOUT_S = 120


@dataclass(frozen=True)
class EntryPoint:
    """One `python -m module [subcommand]` command and the section it belongs to."""

    section: str
    module: str
    subcommand: str = ""

    @property
    def command(self) -> str:
        return f"python -m {self.module}" + (f" {self.subcommand}" if self.subcommand else "")


# The one list of entry points: a new `python -m` command belongs here (and in docs/cli.md, via
# `make docs`).
ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("Services", "services.broker"),
    EntryPoint("Services", "spark.service"),
    EntryPoint("Services", "healthchecker"),
    EntryPoint("Services", "services.status"),
    EntryPoint("Services", "client"),
    EntryPoint("Kaska console tools", "common.kaska"),
    EntryPoint("Kaska console tools", "common.kaska", "topics"),
    EntryPoint("Kaska console tools", "common.kaska", "produce"),
    EntryPoint("Kaska console tools", "common.kaska", "consume"),
    EntryPoint("Kaska console tools", "common.kaska", "offsets"),
    EntryPoint("Running and deploying", "scripts.run_local"),
    EntryPoint("Running and deploying", "scripts.generate_data"),
    EntryPoint("Running and deploying", "scripts.compose_generator"),
    EntryPoint("Running and deploying", "scripts.compose_follow"),
    EntryPoint("Running and deploying", "common.probe"),
    EntryPoint("Faults and verification", "scripts.killer"),
    EntryPoint("Faults and verification", "scripts.chaos_verify"),
    EntryPoint("Faults and verification", "scripts.nemesis"),
    EntryPoint("Benchmarks", "scripts.bench_broker"),
    EntryPoint("Benchmarks", "scripts.bench_replication"),
    EntryPoint("Benchmarks", "scripts.bench_kafka"),
    EntryPoint("Benchmarks", "scripts.bench_clients"),
    EntryPoint("Benchmarks", "scripts.bench_queries"),
    EntryPoint("Benchmarks", "scripts.bench_pipeline"),
    EntryPoint("Benchmarks", "scripts.bench_duckdb"),
    EntryPoint("Benchmarks", "scripts.bench_journal_compaction"),
    EntryPoint("Benchmarks", "scripts.mutate"),
    EntryPoint("Documentation", "scripts.cli_reference"),
)

class HelpFailedError(RuntimeError):
    """An entry point's `--help` did not exit 0."""


# Variables a parser may read a default from: the reference shows the code's defaults.
DEPLOYMENT_ENV_PREFIXES = ("FLIGHTS_", "KASKA_", "COMPOSE_")


def _help_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(DEPLOYMENT_ENV_PREFIXES)}
    env["COLUMNS"] = str(HELP_COLUMNS)
    env["LINES"] = "50"
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def help_text(entry: EntryPoint) -> str:
    """The `--help` output of one entry point, trailing spaces removed.

    The module runs as `python -m` would run it, under a fixed program name (argparse's default
    `prog` is the basename of argv[0], which differs between `-m` and a script path).
    """
    prog = f"python -m {entry.module}"
    code = (
        "import runpy, sys; "
        f"sys.argv = [{prog!r}] + sys.argv[1:]; "
        f"runpy.run_module({entry.module!r}, run_name='__main__')"
    )
    argv = [sys.executable, "-c", code]
    argv += [entry.subcommand] if entry.subcommand else []
    argv.append("--help")
    done = subprocess.run(argv, cwd=REPO_ROOT, env=_help_env(), capture_output=True, text=True,
                          timeout=HELP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise HelpFailedError(f"{entry.command} --help exited {done.returncode}:\n{done.stderr}")
    return "\n".join(line.rstrip() for line in done.stdout.strip("\n").splitlines())


def make_targets(makefile_text: str) -> list[tuple[str, str]]:
    """(target, description) for every rule preceded by a `#: description` line, in file order."""
    targets: list[tuple[str, str]] = []
    description = ""
    for line in makefile_text.splitlines():
        if line.startswith("#:"):
            description = line[2:].strip()
            continue
        rule = re.match(r"^([A-Za-z][\w-]*):(?!=)", line)
        if rule and description:
            targets.append((rule.group(1), description))
        description = ""
    return targets


def render(helps: dict[EntryPoint, str], targets: list[tuple[str, str]]) -> str:
    lines = [
        "# Commands and flags",
        "",
        "<!-- Generated by `python -m scripts.cli_reference` (`make docs`) from the parsers and",
        "     the Makefile; do not edit by hand. tests/unit/scripts/test_cli_reference.py keeps",
        "     it in step. -->",
        "",
        "Every command runs from the repository's root with the project's virtual environment",
        "(`.venv/bin/python`, created by any `make` target). What each one is for, and how they",
        "fit together: [README](../README.md) and [design](design.md).",
        "",
        "## Make targets",
        "",
        "| target | does |",
        "|---|---|",
    ]
    lines += [f"| `make {name}` | {description} |" for name, description in targets]
    sections: list[str] = []
    for entry in ENTRY_POINTS:
        if entry.section not in sections:
            sections.append(entry.section)
    for section in sections:
        lines += ["", f"## {section}"]
        for entry in (e for e in ENTRY_POINTS if e.section == section):
            lines += ["", f"### `{entry.command}`", "", "```text", helps[entry], "```"]
    return "\n".join(lines) + "\n"


def generate() -> str:
    """docs/cli.md as the current parsers and Makefile describe it."""
    workers = min(len(ENTRY_POINTS), max(2, os.cpu_count() or 2) * 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        texts = list(pool.map(help_text, ENTRY_POINTS))
    helps = dict(zip(ENTRY_POINTS, texts, strict=True))
    return render(helps, make_targets(MAKEFILE_PATH.read_text(encoding="utf-8")))


def staleness(written: str, generated: str) -> str:
    """A unified diff from the written reference to the generated one; empty when equal."""
    diff = difflib.unified_diff(written.splitlines(), generated.splitlines(),
                                "docs/cli.md (written)", "docs/cli.md (generated)", lineterm="")
    return "\n".join(diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.cli_reference",
        description="Write docs/cli.md from every entry point's --help and the Makefile's "
                    "targets (their `#:` lines).")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff when docs/cli.md is stale")
    args = parser.parse_args(argv)
    generated = generate()
    if not args.check:
        CLI_DOC_PATH.write_text(generated, encoding="utf-8")
        print(f"wrote {CLI_DOC_PATH.relative_to(REPO_ROOT)}")
        return 0
    written = CLI_DOC_PATH.read_text(encoding="utf-8") if CLI_DOC_PATH.exists() else ""
    diff = staleness(written, generated)
    if diff:
        print(f"{diff}\ndocs/cli.md is stale: run `make docs`", file=sys.stderr)
        return 1
    print("docs/cli.md is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

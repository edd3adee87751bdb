"""run_local's one output channel: every line the run prints goes through `say`, so tests can
replace it in one place (`monkeypatch.setattr(console, "say", ...)`); callers look it up at call
time (`console.say(...)`) for that reason."""

from __future__ import annotations


def say(text: str) -> None:
    print(text, flush=True)

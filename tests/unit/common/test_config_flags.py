"""Flags declared on dataclass fields: defaults, units and errors come from the declaration."""

import argparse
from dataclasses import dataclass

import pytest

from common.config_flags import add_flags, flag_values, setting


@dataclass(frozen=True)
class Toy:
    count: int = setting("--count", "how many", default=3)
    wait_s: float = setting("--wait-ms", "how long, in ms", default=0.25, parse=int,
                            flag_per_field=1000)
    name: str | None = setting("--name", "who", default=None, parse=str, env="TOY_NAME")
    unflagged: int = 7


def parser() -> argparse.ArgumentParser:
    built = argparse.ArgumentParser(prog="toy")
    add_flags(built, Toy)
    return built


def test_defaults_read_back_as_declared(monkeypatch):
    monkeypatch.delenv("TOY_NAME", raising=False)
    assert Toy(**flag_values(Toy, parser().parse_args([]))) == Toy()


def test_units_and_environment(monkeypatch):
    monkeypatch.setenv("TOY_NAME", "env")
    toy = Toy(**flag_values(Toy, parser().parse_args(["--wait-ms", "1500"])))
    assert (toy.wait_s, toy.name) == (1.5, "env")


def test_help_names_the_default_in_the_flag_units(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        parser().parse_args(["--help"])
    text = capsys.readouterr().out
    assert "how long, in ms (default: 250)" in text and "(default: $TOY_NAME)" in text
    assert "--unflagged" not in text


def test_a_bad_value_names_the_flag(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["--count", "three"])
    assert "argument --count: invalid value 'three'" in capsys.readouterr().err

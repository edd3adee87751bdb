"""Command-line flags declared on the frozen dataclass fields they fill.

A setting is declared once, as a field: `setting("--segment-bytes-max", "help...", default=...)`
puts a `Flag` in the field's metadata. `add_flags(parser, Cls)` adds one argparse flag per such
field (default and help from the declaration, the default appended to the help), and
`flag_values(Cls, args)` reads them back as the field values, ready for `Cls(**values)`.
A flag may count in other units than its field (`flag_per_field=1000`: a flag in ms for a
field in seconds), so the code keeps one unit per name while the command line keeps its own.

Why not a library (simple-parsing, tyro): the images ship pinned wheels only, argparse is all the
project uses, and this is the one feature needed; the `--help` stays argparse's.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import math
import os
from collections.abc import Callable
from typing import Any

FLAG_KEY = "flag"


@dataclasses.dataclass(frozen=True, slots=True)
class Flag:
    """How one field is spelled on the command line."""

    name: str  # "--segment-bytes-max"
    help: str
    parse: Callable[[str], Any] | None = None  # None: the type of the default (int, float, str)
    flag_per_field: int = 1  # flag value / this = field value (1000: flag in ms, field in s)
    env: str | None = None  # the default comes from this environment variable when it is set
    required: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


def setting(name: str, help: str, *, default: Any = dataclasses.MISSING, **flag: Any) -> Any:
    """A dataclass field with a command-line flag; `flag`: the rest of `Flag`'s fields."""
    return dataclasses.field(default=default, metadata={FLAG_KEY: Flag(name, help, **flag)})


def declared_flags(cls: type) -> list[tuple[dataclasses.Field, Flag]]:
    return [(field, field.metadata[FLAG_KEY]) for field in dataclasses.fields(cls)
            if FLAG_KEY in field.metadata]


def _flag_default(field: dataclasses.Field, flag: Flag) -> Any:
    value = field.default
    if value is dataclasses.MISSING:
        return None
    if isinstance(value, enum.Enum):
        return value.value
    if flag.flag_per_field != 1 and value is not None:
        scaled = value * flag.flag_per_field
        return int(scaled) if scaled == int(scaled) else scaled
    return value


def _argument_type(field: dataclasses.Field, flag: Flag) -> Callable[[str], Any]:
    parse = flag.parse or type(_flag_default(field, flag))
    if parse is type(None):
        raise TypeError(f"{flag.name}: a flag whose default is None needs parse=")

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from exc
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type) -> None:
    """One flag per field of `cls` declared with `setting`, in declaration order."""
    for field, flag in declared_flags(cls):
        default = _flag_default(field, flag)
        help_text = flag.help
        if flag.env is not None:
            help_text += f" (default: ${flag.env})"
            default = os.environ.get(flag.env) or default
        elif default not in (None, ()) and not flag.required:
            help_text += " (default: %(default)s)"
        parser.add_argument(flag.name, dest=flag.dest, type=_argument_type(field, flag),
                            default=None if flag.required else default, required=flag.required,
                            choices=flag.choices, metavar=flag.metavar, help=help_text)


def flag_values(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The values of `cls`'s flags in `args`, by field name and in the field's units."""
    values = {}
    for field, flag in declared_flags(cls):
        value = getattr(args, flag.dest)
        if flag.flag_per_field != 1 and value is not None:
            value = value / flag.flag_per_field
        values[field.name] = value
    return values


def positive_s(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value

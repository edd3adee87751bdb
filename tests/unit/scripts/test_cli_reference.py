"""docs/cli.md is what `python -m scripts.cli_reference` generates from today's parsers and
Makefile: a flag or target changed without `make docs` fails here, with the diff."""

from scripts import cli_reference
from scripts.cli_reference import EntryPoint


def test_cli_doc_equals_the_regenerated_reference():
    written = cli_reference.CLI_DOC_PATH.read_text(encoding="utf-8")
    diff = cli_reference.staleness(written, cli_reference.generate())
    assert diff == "", f"docs/cli.md is stale; run `make docs`:\n{diff}"


def test_every_entry_point_is_listed_once():
    commands = [entry.command for entry in cli_reference.ENTRY_POINTS]
    assert len(commands) == len(set(commands))


def test_help_runs_under_the_fixed_program_name():
    text = cli_reference.help_text(EntryPoint("Documentation", "scripts.cli_reference"))
    assert text.startswith("usage: python -m scripts.cli_reference [-h] [--check]")


def test_make_targets_are_read_from_their_hash_colon_lines():
    makefile = ("#: builds it\nbuild: $(STAMP)\n\tcc\nVAR := x\n"
                "#: orphan\n\nlint:\n#: tests\ntest: lint\n")
    assert cli_reference.make_targets(makefile) == [("build", "builds it"), ("test", "tests")]


def test_staleness_names_the_changed_line():
    diff = cli_reference.staleness("a\nb\n", "a\nc\n")
    assert "-b" in diff and "+c" in diff

"""common/essential_threads.py: an essential thread's death ends the process (a stand-in exit
here), any other thread's goes to the previous hook."""

from __future__ import annotations

import logging
import threading

import pytest

from common.essential_threads import EXIT_ESSENTIAL_THREAD_DIED, exit_on_essential_thread_death


@pytest.fixture
def hooks(monkeypatch):
    """The previous hook records what reaches it; exits are recorded instead of made."""
    seen: list[str] = []
    exits: list[int] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.thread.name))
    exit_on_essential_thread_death(("kaska-replication-", "reaper-"), exits.append)
    return seen, exits


def _die(name: str, error: BaseException) -> None:
    def run() -> None:
        raise error

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()


def test_an_essential_thread_that_dies_ends_the_process_with_its_story_logged(hooks, caplog):
    seen, exits = hooks
    with caplog.at_level(logging.CRITICAL):
        _die("kaska-replication-2", IndexError("list index out of range"))
    assert exits == [EXIT_ESSENTIAL_THREAD_DIED] and seen == []
    (record,) = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert "kaska-replication-2" in record.getMessage()
    assert "IndexError: list index out of range" in record.getMessage()
    assert record.exc_info is not None, "the traceback is logged"


def test_other_threads_and_a_clean_system_exit_go_to_the_previous_hook(hooks):
    seen, exits = hooks
    _die("kaska-connection-7", RuntimeError("one connection"))
    _die("reaper-data", SystemExit(0))
    assert seen == ["kaska-connection-7", "reaper-data"] and exits == []

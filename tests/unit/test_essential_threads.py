"""common/essential_threads.py: an essential thread's death ends the process (a stand-in exit
here), any other thread's goes to the previous hook."""

from __future__ import annotations

import logging
import threading

import pytest

from common.essential_threads import EXIT_ESSENTIAL_THREAD_DIED, exit_on_essential_thread_death


@pytest.fixture
def hooks(monkeypatch):
    """The previous hook records what reaches it; exits are recorded instead of made; the
    service is stopping once `stopping` is set."""
    seen: list[str] = []
    exits: list[int] = []
    stopping = threading.Event()
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.thread.name))
    exit_on_essential_thread_death(("kaska-replication-", "reaper-"), stopping.is_set,
                                   exits.append)
    return seen, exits, stopping


def _die(name: str, error: BaseException) -> None:
    def run() -> None:
        raise error

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()


def test_an_essential_thread_that_dies_ends_the_process_with_its_story_logged(hooks, caplog):
    seen, exits, _stopping = hooks
    with caplog.at_level(logging.CRITICAL):
        _die("kaska-replication-2", IndexError("list index out of range"))
    assert exits == [EXIT_ESSENTIAL_THREAD_DIED] and seen == []
    (record,) = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert "kaska-replication-2" in record.getMessage()
    assert "IndexError: list index out of range" in record.getMessage()
    assert record.exc_info is not None, "the traceback is logged"


def test_other_threads_and_a_clean_system_exit_go_to_the_previous_hook(hooks):
    seen, exits, _stopping = hooks
    _die("kaska-connection-7", RuntimeError("one connection"))
    _die("reaper-data", SystemExit(0))
    assert seen == ["kaska-connection-7", "reaper-data"] and exits == []


def test_during_a_graceful_stop_a_dying_essential_thread_does_not_change_the_exit(hooks,
                                                                                   caplog):
    """The query service's SIGTERM mid-job: a cancelled job raises in its worker, and the
    service must still exit 0 (the Compose e2e test caught exit 70 here)."""
    seen, exits, stopping = hooks
    stopping.set()
    with caplog.at_level(logging.WARNING):
        _die("kaska-replication-2", RuntimeError("job cancelled"))
    assert exits == [] and seen == []
    assert any("ended during shutdown" in r.getMessage() for r in caplog.records)

"""A service whose essential thread died of a bug exits, rather than live on as a zombie.

A broker whose replication loop raised something unexpected (soak seed 40046 found an
IndexError there) kept its port open and its heartbeats going, because those run on other
threads: the health checkers saw a healthy broker that would never replicate, vote or commit
again. Crash-only instead: `exit_on_essential_thread_death` installs a `threading.excepthook`
that, for a thread whose name starts with one of the given prefixes, logs the exception with
its traceback at CRITICAL and ends the process at once with `EXIT_ESSENTIAL_THREAD_DIED`
(sysexits' EX_SOFTWARE). The checkers then restart the service, which recovers from its data
directory as after a SIGKILL. Any other thread's exception goes to the hook that was there
before (Python's default prints it).

`os._exit`, not `sys.exit`: the hook runs on the dying thread, where SystemExit would end only
that thread; and a graceful shutdown could block on the very thread that died. What the
process holds on disk is already crash-safe (every service survives SIGKILL).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

EXIT_ESSENTIAL_THREAD_DIED = 70

log = logging.getLogger(__name__)


def exit_on_essential_thread_death(prefixes: tuple[str, ...],
                                   stopping: Callable[[], bool] = lambda: False,
                                   exit_process: Callable[[int], None] = os._exit) -> None:
    """Install the hook for threads named `prefixes[i]...` (process-wide; the last call wins).
    `stopping`: whether the service is shutting down gracefully; a thread that dies then (a
    query service's job cancelled by the stop raises in its worker) is logged, and the
    shutdown goes on to its own exit code. `exit_process`: os._exit, or a test's stand-in."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else ""
        if args.exc_type is SystemExit or not name.startswith(prefixes):
            previous(args)
            return
        if stopping():
            log.warning("thread %s ended during shutdown: %s: %s", name, args.exc_type.__name__,
                        args.exc_value)
            return
        log.critical("essential thread %s died: %s: %s; exiting with code %d so that the "
                     "health checkers restart this service", name, args.exc_type.__name__,
                     args.exc_value, EXIT_ESSENTIAL_THREAD_DIED,
                     exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        exit_process(EXIT_ESSENTIAL_THREAD_DIED)

    threading.excepthook = hook

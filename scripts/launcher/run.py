"""One run of the embedded default, wired from the launcher's parts: start the platform, plan
and start the client sessions, run the chaos loop beside them, wait for the sessions (and the
heals), stop everything, print the report (the steps: scripts/run_local.py's docstring).

Invariants: whatever `run` started is stopped before it returns, even on an exception or an
interrupt (health checkers first, so nothing is restarted meanwhile); its exit status is 0 only
if every session completed and every chaos fault healed.
Threads: the caller's, plus the chaos loop's (launcher/chaos.py), the checker keeper's
(launcher/keeper.py: it starts the checkers again if every one was killed) and the platform's
reapers; `interrupted` is set from a signal handler to end the wait early.
"""

from __future__ import annotations

import sys
import threading
import time

from scripts.faults.backends import LocalBackend
from scripts.launcher.chaos import ChaosThread, wait_for_heals
from scripts.launcher.config import LaunchConfig
from scripts.launcher.console import say
from scripts.launcher.keeper import start_keeper
from scripts.launcher.layout import RunLayout
from scripts.launcher.log_tail import LogTail
from scripts.launcher.platform import LocalPlatform, start_platform
from scripts.launcher.prometheus_targets import target_groups, write_targets_file
from scripts.launcher.report import print_report
from scripts.launcher.sessions import ClientSettings, client_argv, plan_clients, wait_for_sessions


def run(config: LaunchConfig, interrupted: threading.Event) -> int:
    """The whole run; the exit status (module doc). Raises RunLocalError, RegistryError or
    OSError when the platform cannot start."""
    started = time.monotonic()
    layout = RunLayout(config.results_dir.resolve(),
                       (config.data_dir or config.results_dir / "run" / "broker-data").resolve(),
                       keep_broker_data=config.data_dir is not None)
    layout.prepare()
    platform = LocalPlatform(layout, config.master, config.brokers, config.status_port)
    chaos = None
    keeper = None
    unhealed = []
    try:
        keeper = start_keeper(platform)  # before the checkers: they can die while others start
        start_platform(platform)
        runs = plan_clients(config)  # generates samples while Spark starts
        ready_s = platform.wait_for_service(config.timeout_s)
        say(f"  query service ready after {ready_s:.1f} s")
        if config.prometheus_targets is not None:
            write_targets_file(config.prometheus_targets, target_groups(platform.scrape_targets()))
            say(f"  Prometheus scrape targets (file_sd) in {config.prometheus_targets}")
        if config.chaos_interval_s:
            chaos = _start_chaos(config, layout)
        sessions_started = time.monotonic()
        settings = ClientSettings(config.batch_rows, config.partitions,
                                  config.client_upload_rows_per_s_max)
        foreground = len(runs) == 1 and chaos is None and sys.stdout.isatty()
        for index, client in enumerate(runs):
            if index and config.client_start_interval_s and \
                    interrupted.wait(config.client_start_interval_s):
                break  # interrupted: the sessions not started are reported as not run
            platform.register(client.name, client_argv(client, platform, settings))
            pid = platform.spawn(client.name, foreground=foreground)
            say(f"  started {client.name:<16} pid {pid:<7} session {client.client_id}")
        tail = None if foreground else LogTail({r.name: layout.log_path(r.name) for r in runs})
        wait_for_sessions(runs, platform, config.timeout_s, tail, interrupted)
        sessions_s = time.monotonic() - sessions_started
        if chaos is not None:
            chaos.stop()
            unhealed = wait_for_heals(chaos.faults, platform.registry, config.heal_timeout_s)
        if config.keep_running and not interrupted.is_set():
            say("sessions over; the platform keeps running until SIGINT or SIGTERM")
            interrupted.wait()
    finally:
        if chaos is not None:
            chaos.stop()
        if keeper is not None:
            keeper.stop()  # first: it would start the checkers that stop_all stops
        say("stopping everything this run started")
        platform.stop_all(config.stop_timeout_s)
    return print_report(runs, layout, chaos, unhealed, sessions_s, time.monotonic() - started)


def _start_chaos(config: LaunchConfig, layout: RunLayout) -> ChaosThread:
    say(f"chaos: a fault every {config.chaos_interval_s:g} s for at most "
        f"{config.chaos_duration_s:g} s ({config.chaos_pause_ratio:g} of them pauses, "
        f"victims {config.chaos_victims})")
    return ChaosThread(LocalBackend(layout.registry_dir), config.chaos_interval_s,
                       config.chaos_duration_s, config.chaos_seed,
                       config.chaos_pause_ratio, config.chaos_victims).start()

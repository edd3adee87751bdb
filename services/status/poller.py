"""The collectors' loop: every `refresh_interval_s` it asks every health checker and broker
(in parallel, each bounded by `request_timeout_s`), reads the new session records, updates the
timeline and the throughput history, and publishes one new document (model.py) that the web
app serves as is. One thread; the document is replaced whole, so readers never see half of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from common.kaska.errors import KaskaError
from common.liveness import Liveness
from services.status import model
from services.status.brokers import (
    BrokerReport,
    BrokerUnreachableError,
    MalformedBrokerMetricsError,
    scrape_broker,
)
from services.status.checkers import (
    CheckerStatus,
    CheckerUnreachableError,
    MalformedCheckerStatusError,
    fetch_checker_status,
)
from services.status.config import StatusConfig
from services.status.plot import History, rates
from services.status.sessions import SessionTracker
from services.status.timeline import (
    Leaders,
    TimelineEvent,
    checker_events,
    merge,
    observed_changes,
)

DATA_TOPIC_PREFIXES = ("flights.", "airports.")
OBSERVED_EVENTS_MAX = 256

log = logging.getLogger(__name__)


def uploaded_total(leader: BrokerReport | None) -> int | None:
    """Batches of client data the cluster holds (high watermarks of every data topic)."""
    if leader is None:
        return None
    return sum(high for (topic, _), (_, high) in leader.partitions.items()
               if topic.startswith(DATA_TOPIC_PREFIXES))


def carry_forward(before: Leaders | None, now: Leaders) -> Leaders:
    """Unknown leaders (nobody answered this time) keep their last known value, so an outage
    of the page's view is not reported as a change of leader."""
    if before is None:
        return now
    return Leaders(now.broker_leader or before.broker_leader,
                   now.broker_epoch if now.broker_leader else before.broker_epoch,
                   now.checker_leader or before.checker_leader)


class Poller:
    def __init__(self, config: StatusConfig, sessions: SessionTracker | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._sessions = sessions or SessionTracker(config.brokers, config.token,
                                                    config.sessions_max,
                                                    config.request_timeout_s)
        self._wall_clock = wall_clock
        self._pool = ThreadPoolExecutor(
            max_workers=len(config.checkers) + len(config.broker_metrics),
            thread_name_prefix="status-collect")
        self._history = History(config.history_points_max)
        self._leaders: Leaders | None = None
        self._observed: list[TimelineEvent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-poller", daemon=True)
        self.progress = Liveness("status poller loop")  # touched each poll: the page's /healthz
        self.document: dict | None = None  # the latest; None until the first poll ends
        self.polls = 0

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop (started or not: a caller may poll with `poll_once` only)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.config.request_timeout_s * 3)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sessions.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.progress.touch()
            started = time.monotonic()
            self.poll_once()
            elapsed_s = time.monotonic() - started
            self._stop.wait(max(self.config.refresh_interval_s - elapsed_s, 0.0))

    # -- one poll ------------------------------------------------------------------------------

    def poll_once(self) -> dict:
        config = self.config
        checker_futures = {
            config.checker_name(i): self._pool.submit(
                fetch_checker_status, config.checker_name(i), address, config.secret,
                config.request_timeout_s) for i, address in enumerate(config.checkers)}
        broker_futures = {
            config.broker_name(i): self._pool.submit(
                scrape_broker, config.broker_name(i), i + 1, address, config.request_timeout_s)
            for i, address in enumerate(config.broker_metrics)}
        sessions_error = self._poll_sessions()
        checkers, checker_errors = _results(checker_futures, (
            CheckerUnreachableError, MalformedCheckerStatusError))
        brokers, broker_errors = _results(broker_futures, (
            BrokerUnreachableError, MalformedBrokerMetricsError))
        self.document = self._document(checkers, checker_errors, brokers, broker_errors,
                                       sessions_error)
        self.polls += 1
        return self.document

    def _poll_sessions(self) -> str | None:
        try:
            self._sessions.poll()
        except KaskaError as error:
            return f"{type(error).__name__}: {error}"
        return None

    def _document(self, checkers: dict[str, CheckerStatus], checker_errors: dict[str, str],
                  brokers: dict[str, BrokerReport], broker_errors: dict[str, str],
                  sessions_error: str | None) -> dict:
        now_s = self._wall_clock()
        leader = model.broker_leader(brokers)
        total = uploaded_total(leader)
        if total is not None:
            self._history.add(now_s, total)
        self._observe(leader, checkers, now_s)
        events = [event for checker in checkers.values()
                  for event in checker_events(checker.name, checker.events)]
        timeline = merge([*events, *self._observed], self.config.dedup_window_s,
                         self.config.timeline_events_max)
        return model.build_status(
            now_s=now_s, refresh_interval_s=self.config.refresh_interval_s,
            checkers=checkers, checker_errors=checker_errors,
            broker_names=[self.config.broker_name(i)
                          for i in range(len(self.config.broker_metrics))],
            brokers=brokers, broker_errors=broker_errors,
            sessions=list(self._sessions.ledger.sessions.values()),
            sessions_error=sessions_error, timeline=timeline,
            upload_rate=rates(self._history.points()), links=self.config.links,
            partitions_shown_max=self.config.partitions_shown_max)

    def _observe(self, leader: BrokerReport | None, checkers: dict[str, CheckerStatus],
                 now_s: float) -> None:
        checker_leader, _since = model.checker_leader(checkers)
        now = carry_forward(self._leaders, Leaders(
            None if leader is None else leader.name, None if leader is None else leader.epoch,
            checker_leader))
        self._observed.extend(observed_changes(self._leaders, now, now_s))
        del self._observed[:-OBSERVED_EVENTS_MAX]
        self._leaders = now


def _results(futures: dict, expected: tuple[type[Exception], ...]) -> tuple[dict, dict]:
    """(name -> result, name -> error text) of the finished futures."""
    results, errors = {}, {}
    for name, future in futures.items():
        try:
            results[name] = future.result()
        except expected as error:
            errors[name] = f"{type(error).__name__}: {error}"
    return results, errors

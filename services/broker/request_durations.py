"""How long the broker takes to answer, by listener and API: the
`kaska_request_duration_seconds{listener, api}` histogram.

Measured from the request's header (its body still unread) to its answer handed to the socket
(Kaska) or ready for the connection's answer thread (Kafka): a produce waiting for its acks
counts its wait. The `api` label is the one each listener's request counter uses
(`kaska_requests_total`: the Kaska API's lower-case name; `kaska_kafka_requests_total`: the
Kafka API's name, e.g. `Produce`), so the two can be joined.

Cheap by design: the connection takes one `time.perf_counter()` pair and `observe` does one
bisect and two adds under a lock (no allocation once a label pair exists). Thread-safe:
connection, deferred-reply and answer threads observe; the scrape thread snapshots.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily

KASKA_LISTENER = "kaska"
KAFKA_LISTENER = "kafka"
# Upper bounds in seconds: a metadata answer takes well under a millisecond, a produce with
# acks=all a few milliseconds, and waits for a lease or acks run up to the 10 s timeouts.
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
             10.0)


class RequestDurations:
    """Per (listener, api): a count per bucket (not cumulative: the last is above every
    bound) and the sum of the seconds observed."""

    def __init__(self, buckets_s: tuple[float, ...] = BUCKETS_S) -> None:
        self._bounds_s = buckets_s
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], list[int]] = {}
        self._sums_s: dict[tuple[str, str], float] = {}

    def observe(self, listener: str, api: str, seconds: float) -> None:
        key = (listener, api)
        slot = bisect.bisect_left(self._bounds_s, seconds)  # `le`: a bound includes itself
        with self._lock:
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = [0] * (len(self._bounds_s) + 1)
                self._sums_s[key] = 0.0
            counts[slot] += 1
            self._sums_s[key] += seconds

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "kaska_request_duration_seconds", "Seconds from a request's header to its answer, "
            "by listener (kaska, kafka) and API (as in each listener's request counter); a "
            "produce's wait for its acks included.", labels=["listener", "api"])
        with self._lock:
            rows = [(key, list(counts), self._sums_s[key])
                    for key, counts in sorted(self._counts.items())]
        for key, counts, sum_s in rows:
            family.add_metric(list(key), list(self._cumulative(counts)), sum_s)
        return family

    def _cumulative(self, counts: list[int]) -> Iterator[tuple[str, int]]:
        running = 0
        for bound_s, count in zip(self._bounds_s, counts, strict=False):
            running += count
            yield str(bound_s), running
        yield "+Inf", running + counts[-1]

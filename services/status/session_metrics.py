"""The sessions' fold backlog as Prometheus metrics, from the status page's latest document.

`flights_session_backlog_records{client_id}`: records of a session's flights topic stored on
the brokers that the query service's streaming fold has not folded yet (stored − folded, the
sessions table's "backlog" column). The fold reads by its own checkpointed offsets, not a
consumer group, so `kaska_consumergroup_lag` does not see it; this gauge does. A session
whose offsets are not read yet (or whose topics are gone) has no sample.

Collected at scrape time from the document the poller last built: a scrape never polls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class SessionBacklogCollector(Collector):
    def __init__(self, document: Callable[[], dict | None]) -> None:
        self._document = document

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "flights_session_backlog_records",
            "Records of a session stored on the brokers and not folded yet by the query "
            "service (stored - folded)", labels=["client_id"])
        doc = self._document()
        for row in (doc or {}).get("sessions", ()):
            backlog = row.get("backlog_records")
            if backlog is not None:
                family.add_metric([row["client_id"]], backlog)
        yield family

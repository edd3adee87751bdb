"""The files a finished session leaves in its results directory.

    q1.csv ... q4.csv   exactly docs/queries.md's formats (common/flights/result_csv.py): header,
                        then the rows in row-number order as the query service numbered them
    summary.json        what happened, for machines and people (see `Summary`)
    report.html         one page: the summary, Q4's average and maximum fare per route, and
                        the stopover distribution of the Q1 itineraries, as inline SVG

The query files stream: `QueryFiles` (a client.results.ResultSink) opens `<query>.csv.partial`
afresh for every query when the results are followed (a restarted client truncates what an
earlier run left), appends each row as the table passes it on, and when the query is complete
flushes, fsyncs and renames the file to `<query>.csv`. `ChartData`, another sink, gathers what
the charts need as the rows pass: Q4's fares (one row per route) and counts of Q1's stopovers,
never the rows themselves. summary.json and report.html are written to `<name>.tmp` and
renamed into place. So no reader (nor a restarted client) sees half a file under a final name.
Only results are reported: the stopover charts describe Q1's itineraries (three or more
stopovers), the rows the client receives.

Thread-safety: plain functions over their arguments; the sinks are used by one thread.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import TextIO

from client.charts import Series, bar_chart
from common.flights.result_csv import LINE_END, QUERY_HEADERS
from common.flights.session_records import QUERIES

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
PARTIAL_SUFFIX = ".partial"
QUERY_FILE_BUFFER_BYTES = 1 << 20
ROUTES_SHOWN_MAX = 40
STOPOVER_AIRPORTS_SHOWN_MAX = 15
STOPOVER_SEPARATOR = "||"
STATUS_COMPLETED, STATUS_FAILED, STATUS_INTERRUPTED = "completed", "failed", "interrupted"


def query_file(results_dir: Path, query: str) -> Path:
    return results_dir / f"{query}.csv"


def partial_query_file(results_dir: Path, query: str) -> Path:
    return results_dir / f"{query}.csv{PARTIAL_SUFFIX}"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


class QueryFiles:
    """q1.csv ... q4.csv written as their rows pass (module doc); a context manager whose exit
    closes the files of unfinished queries, leaving their `.partial` files for the next run to
    truncate."""

    def __init__(self, results_dir: Path) -> None:
        self.results_dir = results_dir
        self._files: dict[str, TextIO] = {}
        results_dir.mkdir(parents=True, exist_ok=True)
        try:
            for query in QUERIES:
                self._start(query)
        except OSError:
            self.close()
            raise

    def _start(self, query: str) -> None:
        path = partial_query_file(self.results_dir, query)
        # Kept open across calls, closed by `finish` or `close`.
        self._files[query] = open(path, "w", encoding="utf-8", newline="",  # noqa: SIM115
                                  buffering=QUERY_FILE_BUFFER_BYTES)
        self.add(query, [list(QUERY_HEADERS[query])])

    def add(self, query: str, rows: list[list[str]]) -> None:
        # The writer settings of common.flights.result_csv.csv_text: the same bytes.
        csv.writer(self._files[query], lineterminator=LINE_END).writerows(rows)

    def finish(self, query: str) -> None:
        file = self._files.pop(query)
        try:
            file.flush()
            os.fsync(file.fileno())
        finally:
            file.close()
        os.replace(partial_query_file(self.results_dir, query),
                   query_file(self.results_dir, query))

    @property
    def unfinished(self) -> list[str]:
        return list(self._files)

    def close(self) -> None:
        while self._files:
            _, file = self._files.popitem()
            file.close()

    def __enter__(self) -> QueryFiles:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class Summary:
    """summary.json: the session's counts and timings (seconds, monotonic differences)."""

    client_id: str
    status: str = STATUS_FAILED
    error: str | None = None
    pid: int = field(default_factory=os.getpid)
    resumed: bool = False
    rows_sent: dict[str, int] = field(default_factory=dict)
    rows_rejected: dict[str, dict[str, int]] = field(default_factory=dict)
    rejected_samples: list[dict] = field(default_factory=list)
    rows_invalid_for_queries: dict[str, dict[str, int]] = field(default_factory=dict)
    rows_per_query: dict[str, int] = field(default_factory=dict)
    duplicates_dropped: dict[str, int] = field(default_factory=dict)
    upload: dict[str, dict[str, int]] = field(default_factory=dict)
    # Flow control of the flights upload (client.upload_window), this run's: window_bytes (0:
    # none), held_back_s, backlog_bytes_peak, log_start_polls.
    upload_window: dict[str, float] = field(default_factory=dict)
    # ResultsAcked stored: the query service may delete the session's topics.
    results_acked: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False) + "\n"


def write_summary(results_dir: Path, summary: Summary) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / SUMMARY_FILE
    write_atomically(path, summary.to_json())
    return path


def read_summary(results_dir: Path) -> dict | None:
    """The summary.json of a results directory, None when there is none (yet)."""
    try:
        return json.loads((results_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


# --- report.html ------------------------------------------------------------------------------


@dataclass
class ChartData:
    """What report.html's charts need, gathered as the rows pass (a client.results.ResultSink,
    rows in row-number order): Q4's fares per route, bounded by the number of routes, and Q1's
    stopovers counted by number and by airport, bounded by the number of airports."""

    q4_fares: list[tuple[str, float, float]] = field(default_factory=list)
    q1_rows: int = 0
    stopover_counts: Counter[int] = field(default_factory=Counter)
    stopover_airports: Counter[str] = field(default_factory=Counter)

    def add(self, query: str, rows: list[list[str]]) -> None:
        if query == "q4":
            self._add_fares(rows)
        elif query == "q1":
            self._add_stopovers(rows)

    def finish(self, query: str) -> None:
        """Nothing to do: the charts are drawn from what `add` gathered."""

    def _add_fares(self, rows: list[list[str]]) -> None:
        for route, avg_text, max_text in rows:
            try:
                self.q4_fares.append((route, float(avg_text), float(max_text)))
            except ValueError:
                continue  # a value the chart cannot place; q4.csv still has it

    def _add_stopovers(self, rows: list[list[str]]) -> None:
        self.q1_rows += len(rows)
        for row in rows:
            codes = row[3].split(STOPOVER_SEPARATOR)
            self.stopover_counts[len(codes)] += 1
            self.stopover_airports.update(codes)


def q4_chart(charts: ChartData) -> str:
    fares = sorted(charts.q4_fares, key=lambda item: (-item[1], item[0]))
    shown = fares[:ROUTES_SHOWN_MAX]
    title = "Q4: fares above the overall mean, per route (USD)"
    if len(fares) > len(shown):
        title += f" — the {len(shown)} highest averages of {len(fares)} routes"
    if not shown:
        return "<p>Q4 has no rows.</p>"
    return bar_chart(title, [route for route, _, _ in shown], [
        Series("average fare", [avg for _, avg, _ in shown], "#4e79a7"),
        Series("maximum fare", [top for _, _, top in shown], "#f28e2b"),
    ])


def stopover_charts(charts: ChartData) -> str:
    if not charts.q1_rows:
        return "<p>Q1 has no rows: no itinerary with three or more stopovers.</p>"
    by_count = sorted(charts.stopover_counts.items())
    top = charts.stopover_airports.most_common(STOPOVER_AIRPORTS_SHOWN_MAX)
    return "\n".join([
        bar_chart("Q1 itineraries by number of stopovers",
                  [f"{count} stopovers" for count, _ in by_count],
                  [Series("itineraries", [float(n) for _, n in by_count], "#59a14f")]),
        bar_chart(f"The {len(top)} most frequent stopover airports in Q1 itineraries",
                  [code for code, _ in top],
                  [Series("stopovers", [float(n) for _, n in top], "#76b7b2")]),
    ])


def _invalid_rows(by_query: dict[str, dict[str, int]]) -> list[tuple[str, str]]:
    """A kind every query counts alike is listed once (the validity rules are shared);
    a kind only some queries count, or count differently (Q2's unknown airports), per query."""
    kinds = dict.fromkeys(kind for counts in by_query.values() for kind in counts)
    shared, own = [], []
    for kind in kinds:
        counts = {query: c[kind] for query, c in by_query.items() if kind in c}
        if len(counts) == len(by_query) and len(set(counts.values())) == 1:
            shared.append((f"rows invalid for the queries: {kind}", f"{counts.popitem()[1]:,}"))
        else:
            own += [(f"rows invalid for {query}: {kind}", f"{n:,}") for query, n in counts.items()]
    return shared + own


def _summary_table(summary: Summary) -> str:
    rows = [("status", summary.status), ("client id", summary.client_id)]
    rows += [(f"rows sent: {name}", f"{n:,}") for name, n in summary.rows_sent.items()]
    for name, kinds in summary.rows_rejected.items():
        rows += [(f"rows rejected by the reader: {name}, {kind}", f"{n:,}")
                 for kind, n in kinds.items()]
    rows += _invalid_rows(summary.rows_invalid_for_queries)
    rows += [(f"{query} rows", f"{n:,}") for query, n in summary.rows_per_query.items()]
    rows += [(f"time: {name}", f"{seconds:,.2f} s") for name, seconds in
             summary.timings_s.items()]
    cells = "\n".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table>\n{cells}\n</table>"


def report_html(charts: ChartData, summary: Summary) -> str:
    files = " ".join(f'<a href="{q}.csv">{q}.csv</a> ({", ".join(QUERY_HEADERS[q])})'
                     for q in QUERIES)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Flights Optimizer — session {escape(summary.client_id)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
th{{text-align:left;font-weight:normal;color:#555;padding-right:2em}}
td{{text-align:right}} svg{{display:block;margin:1.5em 0}}</style></head>
<body>
<h1>Flights Optimizer — session results</h1>
<p>Files: {files}</p>
<h2>Summary</h2>
{_summary_table(summary)}
<h2>Q4: average and maximum fare per route</h2>
{q4_chart(charts)}
<h2>Stopovers</h2>
{stopover_charts(charts)}
</body></html>
"""


def write_report(results_dir: Path, charts: ChartData, summary: Summary) -> Path:
    path = results_dir / REPORT_FILE
    write_atomically(path, report_html(charts, summary))
    return path

"""The files a finished session leaves in its results directory.

    q1.csv ... q4.csv   exactly QUERIES.md's formats (common/result_csv.py): header, then the
                        rows in row-number order as the query service numbered them
    summary.json        what happened, for machines and people (see `Summary`)
    report.html         one page: the summary, Q4's average and maximum fare per route, and
                        the stopover distribution of the Q1 itineraries, as inline SVG

Every file is written to `<name>.tmp` and renamed into place, so a reader (or a restarted
client) never sees half a file. Only results are reported: the stopover charts describe Q1's
itineraries (three or more stopovers), the rows the client receives.

Thread-safety: plain functions over their arguments.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path

from client.charts import Series, bar_chart
from client.results import ResultTable
from common.result_csv import QUERY_HEADERS, csv_text
from common.session_records import QUERIES

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
ROUTES_SHOWN_MAX = 40
STOPOVER_AIRPORTS_SHOWN_MAX = 15
STOPOVER_SEPARATOR = "||"
STATUS_COMPLETED, STATUS_FAILED, STATUS_INTERRUPTED = "completed", "failed", "interrupted"


def query_file(results_dir: Path, query: str) -> Path:
    return results_dir / f"{query}.csv"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def write_query_files(results_dir: Path, table: ResultTable) -> dict[str, Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for query in QUERIES:
        path = query_file(results_dir, query)
        write_atomically(path, csv_text(query, table.ordered_rows(query)))
        written[query] = path
    return written


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


def q4_chart(table: ResultTable) -> str:
    fares = []
    for route, avg_text, max_text in table.ordered_rows("q4"):
        try:
            fares.append((route, float(avg_text), float(max_text)))
        except ValueError:
            continue  # a value the chart cannot place; q4.csv still has it
    fares.sort(key=lambda item: (-item[1], item[0]))
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


def stopover_charts(table: ResultTable) -> str:
    stopovers = [row[3] for row in table.ordered_rows("q1")]
    if not stopovers:
        return "<p>Q1 has no rows: no itinerary with three or more stopovers.</p>"
    counts = Counter(len(text.split(STOPOVER_SEPARATOR)) for text in stopovers)
    by_count = sorted(counts.items())
    airports = Counter(code for text in stopovers for code in text.split(STOPOVER_SEPARATOR))
    top = airports.most_common(STOPOVER_AIRPORTS_SHOWN_MAX)
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


def report_html(table: ResultTable, summary: Summary) -> str:
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
{q4_chart(table)}
<h2>Stopovers</h2>
{stopover_charts(table)}
</body></html>
"""


def write_report(results_dir: Path, table: ResultTable, summary: Summary) -> Path:
    path = results_dir / REPORT_FILE
    write_atomically(path, report_html(table, summary))
    return path

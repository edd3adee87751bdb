"""The files of a finished session: q*.csv exactly as docs/queries.md, summary.json, report.html."""

import json
import xml.etree.ElementTree as ET

from client.charts import Series, bar_chart, nice_ticks
from client.report import (
    ROUTES_SHOWN_MAX,
    ChartData,
    QueryFiles,
    Summary,
    read_summary,
    report_html,
    write_report,
    write_summary,
)
from client.results import ResultTable
from common.flights.result_csv import QUERY_HEADERS
from common.flights.session_records import QueryDone, ResultRows


def charts_of(rows_by_query, results_dir=None):
    """The charts' data of these results, their files written to `results_dir` if given."""
    charts = ChartData()
    files = QueryFiles(results_dir) if results_dir is not None else None
    table = ResultTable([sink for sink in (files, charts) if sink is not None])
    for query, rows in rows_by_query.items():
        table.add_rows(ResultRows(query, 0, rows))
        table.add_done(QueryDone(query, len(rows)))
    assert table.complete()
    return charts


SAMPLE = {
    "q1": [["leg,1", "ATL-BOS", "1234.5", "DFW||ORD||DEN"], ["leg2", "ATL-LAX", "99.0",
                                                            "A||B||C||D"]],
    "q2": [["leg3", "JFK-LAX", "12000.25"]],
    "q3": [["leg2", "ATL-LAX", "A||B||C||D", "P1DT2H5M"]],
    "q4": [["ATL-BOS", "512.3333333333334", "900.0"], ["JFK-LAX", "700.5", '7"01']],
}


def test_query_files_are_exact_text(tmp_path):
    charts_of(SAMPLE, tmp_path)
    assert (tmp_path / "q1.csv").read_bytes() == (
        b"legId,route,totalFare,stopovers\n"
        b'"leg,1",ATL-BOS,1234.5,DFW||ORD||DEN\n'
        b"leg2,ATL-LAX,99.0,A||B||C||D\n")
    assert (tmp_path / "q2.csv").read_text() == "legId,route,totalDistance\nleg3,JFK-LAX,12000.25\n"
    assert (tmp_path / "q3.csv").read_text() == (
        "legId,route,stopovers,travelDuration\nleg2,ATL-LAX,A||B||C||D,P1DT2H5M\n")
    assert (tmp_path / "q4.csv").read_text() == (
        "route,avgFare,maxFare\nATL-BOS,512.3333333333334,900.0\nJFK-LAX,700.5,\"7\"\"01\"\n")
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.partial"))


def test_empty_queries_still_get_their_header(tmp_path):
    charts_of({q: [] for q in QUERY_HEADERS}, tmp_path)
    for query, header in QUERY_HEADERS.items():
        assert (tmp_path / f"{query}.csv").read_text() == ",".join(header) + "\n"


def test_summary_round_trips_as_json(tmp_path):
    summary = Summary(client_id="cid", status="completed", rows_sent={"flights": 10},
                      rows_rejected={"flights": {"wrong_field_count": 2}},
                      rows_invalid_for_queries={"q4": {"bad_fare": 1}},
                      rows_per_query={"q1": 2}, timings_s={"upload": 1.5})
    write_summary(tmp_path, summary)
    data = read_summary(tmp_path)
    assert data == json.loads(summary.to_json())
    assert data["status"] == "completed" and data["rows_rejected"]["flights"] == {
        "wrong_field_count": 2}
    assert read_summary(tmp_path / "missing") is None


def svgs(html: str) -> list[ET.Element]:
    chunks = html.split("<svg")[1:]
    return [ET.fromstring("<svg" + chunk.split("</svg>")[0] + "</svg>") for chunk in chunks]


def test_report_draws_q4_fares_and_stopover_distribution(tmp_path):
    path = write_report(tmp_path, charts_of(SAMPLE), Summary(client_id="cid", status="completed"))
    html = path.read_text()
    charts = svgs(html)  # well-formed XML, escaped labels
    assert len(charts) == 3
    q4_labels = [t.text for t in charts[0].iter("{http://www.w3.org/2000/svg}text")]
    assert "ATL-BOS" in q4_labels
    assert "JFK-LAX" not in q4_labels  # its maxFare is not a number: in q4.csv, not charted
    assert "average fare" in q4_labels and "maximum fare" in q4_labels
    counts = [t.text for t in charts[1].iter("{http://www.w3.org/2000/svg}text")]
    assert "3 stopovers" in counts and "4 stopovers" in counts
    assert "completed" in html and 'href="q1.csv"' in html


def test_q4_chart_shows_the_highest_averages_when_routes_are_many():
    rows = [[f"R{i:03d}-X", str(float(i)), str(float(i + 1))] for i in range(100)]
    html = report_html(charts_of({"q1": [], "q2": [], "q3": [], "q4": rows}),
                       Summary(client_id="c"))
    labels = [t.text for t in svgs(html)[0].iter("{http://www.w3.org/2000/svg}text")]
    assert "R099-X" in labels and "R060-X" in labels and "R059-X" not in labels
    assert f"the {ROUTES_SHOWN_MAX} highest averages of 100 routes" in html
    assert "no itinerary with three or more stopovers" in html


def test_nice_ticks_cover_the_maximum_with_round_steps():
    assert nice_ticks(900.0) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(7.0) == [0, 2, 4, 6, 8]
    assert nice_ticks(0.0) == [0.0, 1.0]


def test_bar_lengths_are_proportional():
    svg = ET.fromstring(bar_chart("t", ["a", "b"], [Series("s", [50.0, 100.0], "#000")]))
    widths = [float(r.get("width")) for r in svg.iter("{http://www.w3.org/2000/svg}rect")]
    assert widths[1] == 2 * widths[0]


def test_summary_table_lists_an_invalid_kind_once_when_every_query_counts_it_alike():
    same = {q: {"bad_fare": 3} for q in ("q1", "q2", "q3", "q4")}
    html = report_html(charts_of(SAMPLE), Summary(client_id="c", rows_invalid_for_queries=same))
    assert html.count("bad_fare") == 1 and "rows invalid for the queries: bad_fare" in html
    differ = {**same, "q2": {"bad_fare": 3, "unknown_airport": 1}, "q4": {"bad_fare": 2}}
    html = report_html(charts_of(SAMPLE), Summary(client_id="c", rows_invalid_for_queries=differ))
    assert "rows invalid for q2: unknown_airport</th><td>1" in html
    assert html.count("bad_fare") == 4  # counted differently by q4: per query

"""The web app (services/status/app.py): the page and `/api/status` show the same document,
503 until the first poll; the SVG plot; the command line's checks."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from common.liveness import Liveness
from services.status.__main__ import build_config, build_parser
from services.status.app import create_app, format_age
from services.status.config import StatusConfigError
from services.status.plot import rates, sparkline_svg
from tests.unit.status.fakes import CID
from tests.unit.status.test_model import check_document, document


def test_before_the_first_poll_both_say_not_ready():
    client = TestClient(create_app(lambda: None))
    assert client.get("/").status_code == 503
    assert client.get("/api/status").status_code == 503
    assert client.get("/healthz").status_code == 503


def test_healthz_is_ok_while_the_poller_goes_round_and_says_why_once_it_stalls():
    clock = [50.0]
    poller_progress = Liveness("status poller loop", lambda: clock[0])
    doc = document()
    client = TestClient(create_app(lambda: doc, [poller_progress], stale_after_s=5.0))
    assert (client.get("/healthz").status_code, client.get("/healthz").text) == (200, "ok")
    clock[0] += 6.0
    answer = client.get("/healthz")
    assert answer.status_code == 503
    assert answer.text == "status poller loop made no progress for 6.0 s (stale after 5 s)"
    assert client.get("/api/status").status_code == 200  # the page still shows the last poll


def test_the_page_and_the_json_show_the_same_document():
    doc = document()
    client = TestClient(create_app(lambda: doc))
    api = client.get("/api/status")
    assert api.status_code == 200 and api.json() == doc
    check_document(api.json())
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<meta http-equiv="refresh" content="1">' in html
    assert 'data-service="broker-2" data-state="dead"' in html
    assert 'data-service="broker-1" data-state="up"' in html
    assert "healthchecker-3" in html and "<polyline" in html
    assert 'href="http://127.0.0.1:8080/"' in html
    assert 'data-group="0" data-state="under-replicated"' in html
    assert 'data-group="1" data-state="no healthy majority"' in html
    assert "without a healthy majority: group 1" in html
    assert client.get("/healthz").text == "ok"


def test_metrics_answer_before_the_first_poll_for_prometheus_to_tell_the_page_is_up():
    client = TestClient(create_app(lambda: None))
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "python_info{" in metrics.text


def test_the_sessions_table_shows_each_sessions_folding_progress():
    html = TestClient(create_app(lambda: document())).get("/").text
    rows = {cid: html.split(f'data-client="{cid}"')[1].split("</tr>")[0]
            for cid in (CID, "d0ne", "n3w")}
    assert '<th>folded</th>' in html
    assert 'data-backlog="8"' in rows[CID]
    assert "12 / 20 batches" in rows[CID] and "(backlog 8)" in rows[CID]
    assert "36 / 36 batches" in rows["d0ne"]
    assert '<span class="muted">(backlog 0)</span>' in rows["d0ne"]
    assert 'data-backlog=""' in rows["n3w"] and "batches" not in rows["n3w"].split(
        'data-backlog=""')[1].split("</td>")[0], "not read yet: a dash, not zeros"


def test_service_names_are_escaped_in_the_page():
    doc = document()
    doc["services"][0]["name"] = "<script>x</script>"
    html = TestClient(create_app(lambda: doc)).get("/").text
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html


def test_rates_ignore_a_counter_that_went_down_and_the_plot_scales_to_its_peak():
    assert rates([(0.0, 10.0), (2.0, 30.0), (3.0, 5.0), (3.0, 9.0)]) == [(2.0, 10.0),
                                                                         (3.0, 0.0)]
    svg = sparkline_svg([(0.0, 0.0), (1.0, 10.0)], "x", width_px=108, height_px=58)
    assert 'points="4.0,54.0 104.0,4.0"' in svg and "peak 10.0/s" in svg
    assert "collecting" in sparkline_svg([], "x")


def test_ages_read_as_people_read_them():
    assert [format_age(s) for s in (None, 0.44, 12.4, 185.0)] == ["–", "0.4 s", "12 s",
                                                                  "3 min 5 s"]


def test_the_command_line_builds_a_checked_config():
    args = build_parser().parse_args(["--brokers", "b1:9092,b2:9092", "--checkers",
                                      "h1:9101", "--link", "Spark=http://x:8080/"])
    config = build_config(args, b"s")
    assert config.broker_metrics == (("b1", 9100), ("b2", 9100))
    assert config.links == (("Spark", "http://x:8080/"),)
    args.refresh_interval_s = 0
    with pytest.raises(StatusConfigError, match="refresh_interval_s"):
        build_config(args, b"s")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--brokers", "b:1", "--checkers", "no-port"])


def test_metrics_carry_each_sessions_fold_backlog_from_the_latest_document():
    doc = document()
    backlogs = {row["client_id"]: row["backlog_records"] for row in doc["sessions"]}
    assert backlogs[CID] == 8 and None in backlogs.values()  # a session without offsets read
    text = TestClient(create_app(lambda: doc)).get("/metrics").text
    samples = [line for line in text.splitlines()
               if line.startswith("flights_session_backlog_records{")]
    assert f'flights_session_backlog_records{{client_id="{CID}"}} 8.0' in samples
    assert len(samples) == sum(b is not None for b in backlogs.values())

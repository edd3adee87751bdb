"""`run_local --prometheus-targets FILE`: the file_sd JSON of every /metrics endpoint of the
embedded default (scripts/launcher/prometheus_targets.py, LocalPlatform.scrape_targets)."""

from __future__ import annotations

import json

from scripts.launcher import console
from scripts.launcher.layout import RunLayout
from scripts.launcher.platform import LocalPlatform
from scripts.launcher.prometheus_targets import target_groups, write_targets_file
from scripts.run_local import parse_args


def test_every_metrics_endpoint_becomes_a_labelled_target_group(tmp_path, monkeypatch):
    monkeypatch.setattr(console, "say", lambda text: None)
    layout = RunLayout(tmp_path / "results", tmp_path / "data", keep_broker_data=False)
    layout.prepare()
    platform = LocalPlatform(layout, "local[2]", broker_count=3)
    groups = target_groups(platform.scrape_targets())
    by_service = {group["labels"]["service"]: group for group in groups}
    assert sorted(by_service) == ["broker-1", "broker-2", "broker-3", "healthchecker-1",
                                  "healthchecker-2", "healthchecker-3", "query-service"]
    assert by_service["broker-2"] == {
        "targets": [f"127.0.0.1:{platform.broker_metrics_ports[1]}"],
        "labels": {"job": "kaska-broker", "service": "broker-2"}}
    assert by_service["healthchecker-1"]["targets"] == [
        f"127.0.0.1:{platform.checker_metrics_ports[0]}"]
    assert by_service["query-service"]["labels"]["job"] == "query-service"
    path = tmp_path / "prometheus" / "targets.json"
    write_targets_file(path, groups)
    assert json.loads(path.read_text()) == groups
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]  # no partial left


def test_run_local_takes_the_flag(tmp_path):
    args = parse_args(["--results-dir", str(tmp_path), "--prometheus-targets",
                       str(tmp_path / "t.json")])
    assert args.prometheus_targets == tmp_path / "t.json"
    assert parse_args(["--results-dir", str(tmp_path)]).prometheus_targets is None

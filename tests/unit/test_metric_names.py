"""Every metric of the three services follows Prometheus naming conventions: one prefix per
service, lower snake case, `_total` on counters only, base units as the last word, histograms
in seconds or bytes (their buckets, count and sum; no `_created`). Walks the real registries
(collectors and `prometheus_client.Histogram`s) over fake inputs (tests/unit/metrics_fakes.py)."""

from __future__ import annotations

import re

import pytest

from tests.unit.metrics_fakes import (
    fake_broker_registry,
    fake_checker_registry,
    fake_query_service_registry,
    families,
)

REGISTRIES = {
    "kaska": fake_broker_registry,
    "healthchecker": fake_checker_registry,
    "query_service": fake_query_service_registry,
}
NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
LABEL = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
BASE_UNITS = {"seconds", "bytes"}
# Scaled or non-base units Prometheus asks to avoid (use seconds and bytes).
NON_BASE_UNITS = {"ms", "millis", "milliseconds", "us", "microseconds", "ns", "minutes", "hours",
                  "days", "kb", "mb", "gb", "kib", "mib", "gib", "kilobytes", "megabytes",
                  "percent"}
RESERVED_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created", "_info")


def _all_families():
    for prefix, build in REGISTRIES.items():
        for name, family in families(build()).items():
            yield prefix, name, family


ALL = list(_all_families())


def test_each_registry_exports_something():
    assert {prefix for prefix, _, _ in ALL} == set(REGISTRIES)


@pytest.mark.parametrize(("prefix", "name", "family"), ALL, ids=[name for _, name, _ in ALL])
def test_metric_name_follows_prometheus_conventions(prefix, name, family):
    assert name.startswith(f"{prefix}_"), f"{name}: every {prefix} metric starts {prefix}_"
    assert NAME.match(name), f"{name}: lower snake case"
    assert family.documentation.strip(), f"{name}: needs HELP text"
    words = name.split("_")
    assert not NON_BASE_UNITS & set(words), f"{name}: use base units (seconds, bytes)"
    for unit in BASE_UNITS & set(words):
        assert words[-1] == unit, f"{name}: the unit {unit} comes last (before _total)"
    assert not name.endswith(RESERVED_SUFFIXES), f"{name}: reserved suffix in the family name"
    if family.type == "counter":
        assert {s.name for s in family.samples} <= {f"{name}_total"}, name
    elif family.type == "gauge":
        assert {s.name for s in family.samples} <= {name}, name
    elif family.type == "histogram":
        assert words[-1] in BASE_UNITS, f"{name}: a histogram of seconds or bytes"
        suffixes = {s.name.removeprefix(name) for s in family.samples}
        assert suffixes == {"_bucket", "_count", "_sum"}, name
        assert all(s.labels.get("le") for s in family.samples if s.name.endswith("_bucket"))
    else:
        pytest.fail(f"{name}: unexpected type {family.type}")
    for sample in family.samples:
        for label in sample.labels:
            assert LABEL.match(label) and not label.startswith("__"), f"{name}: label {label}"
            assert label != "le" or family.type == "histogram", f"{name}: le is histograms'"


def test_no_name_is_exported_by_two_services():
    names = [name for _, name, _ in ALL]
    assert len(names) == len(set(names))

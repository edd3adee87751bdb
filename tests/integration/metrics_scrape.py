"""Scraping a service's `/metrics` in integration tests: the text, parsed into samples."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 10.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int, host: str = "127.0.0.1") -> tuple[str, Samples]:
    """(exposition text, {(sample name, sorted label pairs): value})."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics",
                                timeout=SCRAPE_TIMEOUT_S) as answer:
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return text, samples


def excerpt(text: str, *prefixes: str) -> str:
    """The lines of `text` that start with one of `prefixes` (for a readable test log)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(prefixes))

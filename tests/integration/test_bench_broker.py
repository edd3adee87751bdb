"""The broker benchmark runs end to end on a small volume and prints one sane JSON line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_bench_broker_prints_one_json_line_with_every_figure():
    done = subprocess.run(
        [sys.executable, "-m", "scripts.bench_broker", "--records", "30000",
         "--record-bytes", "100", "--batch-bytes", "65536", "--repeats", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    for name in ("produce_records_per_s", "produce_mb_per_s", "consume_records_per_s",
                 "consume_mb_per_s", "ceiling_recv_into_mmap_mb_per_s",
                 "ceiling_sendfile_mb_per_s", "produce_vs_ceiling", "consume_vs_ceiling"):
        assert figures[name] > 0, name
    assert figures["records"] == 30000
    # 100-byte records plus a 4-byte length each, in batches with a 60-byte header.
    assert 30000 * 104 < figures["wire_bytes"] < 30000 * 104 * 1.01
    assert all(len(times) == 2 for times in figures["seconds"].values())
    assert set(figures["server_cpu_s_per_gb"]) == set(figures["seconds"]) == {
        "ceiling_in", "produce", "ceiling_out", "consume"}

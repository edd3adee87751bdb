"""What one run of the embedded default is asked to do: `LaunchConfig`, the typed settings the
launcher library takes (scripts/run_local.py builds one from its flags; chaos_verify and the
benchmarks build theirs in code), and their defaults.

Invariants: a LaunchConfig is immutable; its values are checked by whoever builds it from user
input (run_local's parser); the library trusts them.
Threads: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scripts.launcher.brokers import BROKERS_DEFAULT

ROWS_DEFAULT = 200_000
SEED_DEFAULT = 1
INVALID_RATE_DEFAULT = 0.01
CLIENTS_DEFAULT = 1
PARTITIONS_DEFAULT = 4
MASTER_DEFAULT = "local[2]"
TIMEOUT_S_DEFAULT = 1800.0
STOP_TIMEOUT_S_DEFAULT = 10.0
CHAOS_DURATION_S_DEFAULT = 60.0
HEAL_TIMEOUT_S_DEFAULT = 120.0


@dataclass(frozen=True)
class LaunchConfig:
    """One run: where it writes, its inputs (files, or a sample generated from rows / seed /
    invalid rate), the platform's shape, the clients, and the chaos loop (off at interval 0)."""

    def rows_of(self, index: int) -> int:
        """Rows of client `index`'s (1-based) generated sample."""
        return self.client_rows[index - 1] if self.client_rows else self.rows

    results_dir: Path
    flights: Path | None = None
    airports: Path | None = None
    data_dir: Path | None = None  # keep the brokers' data here (default: fresh, under run/)
    brokers: int = BROKERS_DEFAULT
    rows: int = ROWS_DEFAULT
    seed: int = SEED_DEFAULT
    invalid_rate: float = INVALID_RATE_DEFAULT
    clients: int = CLIENTS_DEFAULT
    # Rows of each client's generated sample, in client order (None: `rows` for every one);
    # when given, its length is the number of clients.
    client_rows: tuple[int, ...] | None = None
    client_start_interval_s: float = 0.0  # client i starts (i - 1) times this after the first
    batch_rows: int | None = None  # rows per client message (None: the client's default)
    partitions: int = PARTITIONS_DEFAULT
    master: str = MASTER_DEFAULT
    status_port: int = 0  # 0: a free one
    chaos_interval_s: float = 0.0
    chaos_duration_s: float = CHAOS_DURATION_S_DEFAULT
    chaos_seed: int | None = None
    chaos_pause_ratio: float = 0.0
    chaos_victims: str = "random"  # a key of scripts/faults/victims.PICKERS
    heal_timeout_s: float = HEAL_TIMEOUT_S_DEFAULT
    client_upload_rows_per_s_max: float = 0.0  # 0: no ceiling
    keep_running: bool = False
    timeout_s: float = TIMEOUT_S_DEFAULT
    stop_timeout_s: float = STOP_TIMEOUT_S_DEFAULT
    prometheus_targets: Path | None = None  # write the scrape targets here (file_sd JSON)

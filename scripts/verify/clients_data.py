"""Each client its own input, for a chaos round of several Compose clients (many clients at
once, each with its own data, different sizes, malformed rows).

`OwnData` is what `run_round` judges the clients with when each has its own data: the directory
the deployment mounts as /data, and per client its `SessionData` (files and reference). The
Compose rendering's client i reads `client-<i>/` of that directory when it holds the files
(compose/docker-compose.yaml.j2); the files at the top are client-1's, linked, so the data
generator finds data and generates none.

Sizes: client i of N gets rows * (N + 1 - i) / N rows (the first the most, the last 1/N of
them), seed + i - 1: different sizes and different rows, each with the generator's invalid rows
and the session check's malformed lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oracle.session_check import SessionData
from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE
from scripts.verify.rounds import RoundError
from scripts.verify.session_data import prepare_session_data


@dataclass(frozen=True)
class OwnData:
    directory: Path  # mounted as /data: client-<i>/ per client, client-1's files at the top
    by_client: dict[str, SessionData]

    def of(self, client: str) -> SessionData:
        try:
            return self.by_client[client]
        except KeyError:
            raise RoundError(f"{client} has no input of its own: the round ran clients "
                             f"{sorted(self.by_client)}") from None


def client_rows(rows: int, clients: int, number: int) -> int:
    """Rows of client `number` (1-based) of `clients`: from `rows` down to rows / clients."""
    return max(1, rows * (clients + 1 - number) // clients)


def prepare_own_data(work_dir: Path, clients: int, rows: int, seed: int,
                     invalid_rate: float, reference: str = "python") -> OwnData:
    directory = work_dir / "data"
    by_client = {}
    for number in range(1, clients + 1):
        name = f"client-{number}"
        by_client[name] = prepare_session_data(
            work_dir / "data-clean" / name, directory / name,
            client_rows(rows, clients, number), seed + number - 1, invalid_rate, reference)
    for file in (FLIGHTS_FILE, AIRPORTS_FILE):
        top = directory / file
        top.unlink(missing_ok=True)
        top.symlink_to(Path("client-1") / file)  # relative: it resolves inside a container too
    directory.chmod(0o755)
    return OwnData(directory, by_client)

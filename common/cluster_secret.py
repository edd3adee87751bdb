"""The deployment's shared secret: where a process finds it, and how big it may be.

One secret authenticates every frame between the platform's processes: the brokers' peer frames
(services/broker/replication/wire/peer_auth.py), the health checkers' election packets and the
services' heartbeats (common/heartbeat.py). It never travels on a command line (`ps` shows those
to every user of the host) nor in an image: a process reads it from the file named by
`--secret-file` (run_local writes one, mode 0600) or else from the environment variable
`FLIGHTS_CLUSTER_SECRET` (Compose passes it so; `make docker-compose-up` generates it once into
`.secrets/`). Surrounding whitespace is dropped, so `echo $SECRET > file` works.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

SECRET_ENV = "FLIGHTS_CLUSTER_SECRET"
SECRET_BYTES_MAX = 4096
GENERATED_SECRET_BYTES = 32


class ClusterSecretError(ValueError):
    """The secret cannot be read, or is empty or too long; `source` names where it came from."""

    source: str = ""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"cluster secret from {source}: {problem}")
        self.source = source


def _checked(secret: bytes, source: str) -> bytes:
    secret = secret.strip()
    if not 0 < len(secret) <= SECRET_BYTES_MAX:
        raise ClusterSecretError(source, f"must hold 1..{SECRET_BYTES_MAX} bytes, "
                                         f"holds {len(secret)}")
    return secret


def read_secret_file(path: Path) -> bytes:
    try:
        return _checked(Path(path).read_bytes(), str(path))
    except OSError as error:
        raise ClusterSecretError(str(path), f"cannot read it: {error.strerror}") from error


def load_secret(secret_file: Path | None,
                environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The secret from `secret_file`, else from $FLIGHTS_CLUSTER_SECRET; None when neither."""
    if secret_file is not None:
        return read_secret_file(secret_file)
    value = environ.get(SECRET_ENV)
    if value is None:
        return None
    return _checked(value.encode("utf-8"), f"${SECRET_ENV}")


def write_secret_file(path: Path) -> bytes:
    """A fresh random secret in a new file readable by its owner only (0600)."""
    secret = secrets.token_hex(GENERATED_SECRET_BYTES).encode("ascii")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(secret)
    path.chmod(0o600)  # an existing file kept its mode through O_CREAT
    return secret

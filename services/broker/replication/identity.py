"""BrokerIdentity: which cluster a data directory belongs to, which incarnation of the broker it
holds, and whether that broker may vote yet (docs/replication.md, "Membership and identity";
Kafka's meta.properties and KIP-853's directory id).

File (under `DATA/@replication/`, CheckpointStore's atomic, checksummed, fsynced scheme: see
common/checkpoint.py):

    identity.current / identity.old
        {"cluster_id": str, "incarnation": int 1..2**64-1, "voter": bool}

- `cluster_id`: written on the first start, compared with the configured one on every start
  after: another one is `ClusterIdMismatchError` and the broker refuses to start (its data
  belongs to another cluster). Configured with `--cluster-id` / $FLIGHTS_KASKA_CLUSTER_ID;
  absent, `derived_cluster_id(voters)` (the same on every broker of one voter set).
- `incarnation`: random, made with the file. A broker whose directory was emptied comes back
  with another one; it travels on every peer frame (peer_auth.py), so a leader never trusts
  what it knew of the broker's journal before (its match index).
- `voter`: false from the moment a directory is made in a cluster (it may be a broker that lost
  its state: it may have voted in an epoch it forgot, and held entries a leader counted) until
  the state machine promotes it (raft.py, "Learners"); true from then on, and for a directory
  that already held replication state when identities came in.

Invariants: once written, `cluster_id` and `incarnation` never change; `voter` goes from false
to true only. `load` raises on a file it cannot read rather than guess (a guessed `voter` could
let a broker vote twice in one epoch), like QuorumStore.

Thread-safety: the store serialises its own saves and loads (CheckpointStore's lock); the node
saves under its node lock.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from common.checkpoint import CheckpointStore, CorruptCheckpointError
from services.broker.replication.errors import ReplicationError
from services.broker.replication.wire.peer_auth import CLUSTER_ID_BYTES_MAX

IDENTITY_NAME = "identity"
CLUSTER_ID_ENV = "FLIGHTS_KASKA_CLUSTER_ID"
_PAYLOAD_BYTES_MAX = 4096
_CLUSTER_ID = re.compile(rf"[A-Za-z0-9._-]{{1,{CLUSTER_ID_BYTES_MAX}}}")
INCARNATION_MAX = 2**64 - 1


class ClusterIdError(ValueError):
    """A configured cluster id that cannot travel: 1..32 characters of [A-Za-z0-9._-]."""

    cluster_id: str = ""

    def __init__(self, cluster_id: str) -> None:
        super().__init__(f"cluster id {cluster_id!r} must be 1..{CLUSTER_ID_BYTES_MAX} "
                         "characters of A-Z a-z 0-9 . _ -")
        self.cluster_id = cluster_id


class ClusterIdMismatchError(ReplicationError):
    """The data directory belongs to another cluster than the one configured: the broker
    refuses to start rather than mix the two clusters' journals and votes."""

    stored: str = ""
    configured: str = ""
    path: str = ""

    def __init__(self, stored: str, configured: str, path: Path) -> None:
        super().__init__(f"{path} holds cluster id {stored!r}, this broker is configured for "
                         f"{configured!r}: refusing to start (point --data-dir at this "
                         "cluster's directory, or empty it to rejoin as a new learner)")
        self.stored, self.configured, self.path = stored, configured, str(path)


def check_cluster_id(cluster_id: str) -> str:
    if not isinstance(cluster_id, str) or not _CLUSTER_ID.fullmatch(cluster_id):
        raise ClusterIdError(str(cluster_id))
    return cluster_id


def derived_cluster_id(voters) -> str:
    """The default cluster id: a digest of the sorted voter ids, so every broker of a voter set
    derives the same one without configuration. Two clusters of the same ids share it: give
    each its own `--cluster-id` when several can reach one another."""
    digest = hashlib.sha256(",".join(str(v) for v in sorted(voters)).encode()).hexdigest()
    return f"kaska-{digest[:16]}"


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_id: str
    incarnation: int
    voter: bool

    @classmethod
    def fresh(cls, cluster_id: str, voter: bool) -> BrokerIdentity:
        return cls(cluster_id, secrets.randbelow(INCARNATION_MAX) + 1, voter)


class IdentityStore:
    def __init__(self, directory: Path | str):
        self._store = CheckpointStore(directory, IDENTITY_NAME, _PAYLOAD_BYTES_MAX)
        self.path = self._store.current_path

    def load(self) -> BrokerIdentity | None:
        """The saved identity; None when none was ever saved."""
        try:
            value = self._store.load_json()
        except ValueError as exc:  # a valid checksum around something that is not JSON
            raise CorruptCheckpointError(f"{self.path}: {exc}") from None
        if value is None:
            return None
        fields = value if isinstance(value, dict) else {}
        cluster_id = fields.get("cluster_id")
        incarnation = fields.get("incarnation")
        voter = fields.get("voter")
        if not (isinstance(cluster_id, str) and _CLUSTER_ID.fullmatch(cluster_id)
                and isinstance(incarnation, int) and not isinstance(incarnation, bool)
                and 1 <= incarnation <= INCARNATION_MAX and isinstance(voter, bool)):
            raise CorruptCheckpointError(f"{self.path}: not a broker identity: {value!r}")
        return BrokerIdentity(cluster_id, incarnation, voter)

    def save(self, identity: BrokerIdentity) -> None:
        """Durable (fsynced) when it returns."""
        self._store.save_json({"cluster_id": identity.cluster_id,
                               "incarnation": identity.incarnation, "voter": identity.voter})

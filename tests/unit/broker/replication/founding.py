"""Tests' stand-in for a formed cluster: the identity file of a founding voter.

A broker whose data directory is made in a cluster starts as a learner until it has heard from
every voter (raft.py, "learners"); tests that drive ReplicationNode objects without a network
start their brokers as the voters a formed cluster would have made them.
"""

from __future__ import annotations

from pathlib import Path

from services.broker.replication.identity import BrokerIdentity, IdentityStore
from services.broker.replication.node import REPLICATION_DIR, ReplicationConfig


def founding_voter(data_dir: Path, config: ReplicationConfig) -> None:
    """Mark `data_dir` a voter of `config`'s cluster, unless it already has an identity."""
    directory = Path(data_dir) / REPLICATION_DIR
    directory.mkdir(parents=True, exist_ok=True)
    store = IdentityStore(directory)
    if store.load() is None:
        store.save(BrokerIdentity.fresh(config.resolved_cluster_id(), voter=True))

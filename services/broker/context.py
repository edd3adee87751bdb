"""Everything a request handler may use, passed explicitly (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from services.broker.config import BrokerConfig
from services.broker.metrics import BrokerCounters
from services.broker.notifier import DataNotifier
from services.broker.offsets import CommittedOffsets
from services.broker.peer_gate import PeerGate
from services.broker.replica_manager import ReplicaManager
from services.broker.storage.log import Log


@dataclass(frozen=True, slots=True)
class BrokerContext:
    config: BrokerConfig
    log: Log
    offsets: CommittedOffsets
    replicas: ReplicaManager
    notifier: DataNotifier
    metrics: BrokerCounters
    peer_gate: PeerGate

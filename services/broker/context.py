"""Everything a request handler may use, passed explicitly (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from services.broker.config import BrokerConfig
from services.broker.groups import GroupedLog, GroupedReplicas
from services.broker.metrics import BrokerCounters
from services.broker.notifier import DataNotifier
from services.broker.offsets import CommittedOffsets
from services.broker.peer_gate import PeerGate


@dataclass(frozen=True, slots=True)
class BrokerContext:
    config: BrokerConfig
    log: GroupedLog  # every group's partitions (groups.py)
    offsets: CommittedOffsets
    replicas: GroupedReplicas
    notifier: DataNotifier
    metrics: BrokerCounters
    peer_gate: PeerGate

"""The replication wire: the codecs only brokers speak to each other (docs/replication.md).

- vote.py: VOTE, a candidate's (or pre-candidate's) request for a vote and its answer;
- replica_fetch.py: REPLICA_FETCH, a follower's fetch of journal entries and their bytes;
- snapshot_fetch.py: SNAPSHOT_FETCH, and the snapshot table a compacted journal starts with;
- replication_bounds.py: the range checks every decoded replication body passes;
- peer_auth.py: the stamp and MAC (keyed BLAKE3) every replication frame carries.

Their API numbers (`Api`, `REPLICATION_APIS`), the frame header and the body codecs stay in
common/kaska/protocol/, shared with the clients' APIs, which never send these.
"""

from common.kaska.protocol.frames import REPLICATION_APIS, Api
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest, ReplicaFetchResponse
from services.broker.replication.wire.snapshot_fetch import (
    SnapshotFetchRequest,
    SnapshotFetchResponse,
)
from services.broker.replication.wire.vote import VoteRequest, VoteResponse

PEER_REQUEST_TYPES = {
    Api.VOTE: VoteRequest,
    Api.REPLICA_FETCH: ReplicaFetchRequest,
    Api.SNAPSHOT_FETCH: SnapshotFetchRequest,
}

PEER_RESPONSE_TYPES = {
    Api.VOTE: VoteResponse,
    Api.REPLICA_FETCH: ReplicaFetchResponse,
    Api.SNAPSHOT_FETCH: SnapshotFetchResponse,
}
assert set(PEER_REQUEST_TYPES) == REPLICATION_APIS == set(PEER_RESPONSE_TYPES)

__all__ = [
    "PEER_REQUEST_TYPES", "PEER_RESPONSE_TYPES", "ReplicaFetchRequest", "ReplicaFetchResponse",
    "SnapshotFetchRequest", "SnapshotFetchResponse", "VoteRequest", "VoteResponse",
]

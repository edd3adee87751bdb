"""VOTE (broker to broker): a candidate asks a voter for its vote in an election.

Request:  i32 candidate | i32 epoch | i32 last_epoch | i64 end | u8 pre_vote | u8 transfer
Response: i32 epoch | u8 granted | i32 leader_id (-1: unknown) | u8 pre_vote

`pre_vote` (Raft §9.6): "would you vote for me in `epoch`?", answered without any change of
state, so a broker that cannot win never raises the cluster's epoch.

`transfer` (Raft thesis §3.10, leadership transfer): the candidate stands because its leader handed
leadership to it (a TIMEOUT_NOW fetch answer) and stepped down; a voter grants it even while
it still hears from that leader.

`(last_epoch, end)` describe the candidate's journal; a voter grants only to a journal at least
as complete as its own (docs/replication.md). The answer's epoch and leader let a stale
candidate adopt the newer epoch at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from common.kaska.errors import InvalidResponseError
from common.kaska.protocol.codec import BodyReader, BodyWriter
from common.kaska.protocol.frames import Api
from common.kaska.protocol.metadata import NO_LEADER

# NO_LEADER is re-exported: the leader_id of an answer that knows no leader.
__all__ = ["NO_LEADER", "VoteRequest", "VoteResponse"]


@dataclass(frozen=True, slots=True)
class VoteRequest:
    API: ClassVar[Api] = Api.VOTE
    candidate: int
    epoch: int
    last_epoch: int
    end: int
    pre_vote: bool = False
    transfer: bool = False

    def encode(self) -> bytes:
        return (BodyWriter().i32(self.candidate).i32(self.epoch).i32(self.last_epoch)
                .i64(self.end).flag(self.pre_vote).flag(self.transfer).getvalue())

    @classmethod
    def decode(cls, buf) -> VoteRequest:
        reader = BodyReader(buf)
        request = cls(reader.i32("candidate"), reader.i32("epoch"), reader.i32("last_epoch"),
                      reader.i64("end"), reader.flag("pre_vote"), reader.flag("transfer"))
        reader.finish()
        return request


@dataclass(frozen=True, slots=True)
class VoteResponse:
    epoch: int
    granted: bool
    leader_id: int  # NO_LEADER when the voter knows none
    pre_vote: bool = False

    def encode(self) -> bytes:
        return (BodyWriter().i32(self.epoch).flag(self.granted).i32(self.leader_id)
                .flag(self.pre_vote).getvalue())

    @classmethod
    def decode(cls, buf) -> VoteResponse:
        reader = BodyReader(buf, InvalidResponseError)
        response = cls(reader.i32("epoch"), reader.flag("granted"), reader.i32("leader_id"),
                       reader.flag("pre_vote"))
        reader.finish()
        return response

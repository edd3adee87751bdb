"""The Kaska wire protocol: frame headers (`frames`), bounded body codecs (`codec`) and one
module per client API holding its request and response bodies.

The replication APIs (`frames.REPLICATION_APIS`: VOTE, REPLICA_FETCH, SNAPSHOT_FETCH) keep
their numbers in `frames.Api`, but only brokers speak them: their codecs and the peer frames'
signatures are the broker's (services/broker/replication/wire/), not registered here."""

from common.kaska.protocol.authenticate import AuthenticateRequest
from common.kaska.protocol.commit_offset import CommitOffsetRequest
from common.kaska.protocol.create_topic import CreateTopicRequest, CreateTopicResponse
from common.kaska.protocol.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from common.kaska.protocol.delete_topic import DeleteTopicRequest
from common.kaska.protocol.fetch import FetchRequest, FetchResponse
from common.kaska.protocol.fetch_committed import FetchCommittedRequest, FetchCommittedResponse
from common.kaska.protocol.frames import REPLICATION_APIS, Api, EmptyResponse, ErrorBody
from common.kaska.protocol.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from common.kaska.protocol.list_topics import ListTopicsRequest, ListTopicsResponse
from common.kaska.protocol.message_length import MessageLengthRequest, MessageLengthResponse
from common.kaska.protocol.metadata import MetadataRequest, MetadataResponse
from common.kaska.protocol.produce import ProduceRequest, ProduceResponse

REQUEST_TYPES = {
    Api.PRODUCE: ProduceRequest,
    Api.FETCH: FetchRequest,
    Api.LIST_OFFSETS: ListOffsetsRequest,
    Api.METADATA: MetadataRequest,
    Api.CREATE_TOPIC: CreateTopicRequest,
    Api.DELETE_TOPIC: DeleteTopicRequest,
    Api.LIST_TOPICS: ListTopicsRequest,
    Api.MESSAGE_LENGTH: MessageLengthRequest,
    Api.COMMIT_OFFSET: CommitOffsetRequest,
    Api.FETCH_COMMITTED: FetchCommittedRequest,
    Api.AUTHENTICATE: AuthenticateRequest,
    Api.DELETE_RECORDS: DeleteRecordsRequest,
}

RESPONSE_TYPES = {
    Api.PRODUCE: ProduceResponse,
    Api.FETCH: FetchResponse,
    Api.LIST_OFFSETS: ListOffsetsResponse,
    Api.METADATA: MetadataResponse,
    Api.CREATE_TOPIC: CreateTopicResponse,
    Api.DELETE_TOPIC: EmptyResponse,
    Api.LIST_TOPICS: ListTopicsResponse,
    Api.MESSAGE_LENGTH: MessageLengthResponse,
    Api.COMMIT_OFFSET: EmptyResponse,
    Api.FETCH_COMMITTED: FetchCommittedResponse,
    Api.AUTHENTICATE: EmptyResponse,
    Api.DELETE_RECORDS: DeleteRecordsResponse,
}
assert set(REQUEST_TYPES) == set(Api) - REPLICATION_APIS == set(RESPONSE_TYPES)

__all__ = [
    "Api", "AuthenticateRequest", "CommitOffsetRequest", "CreateTopicRequest",
    "CreateTopicResponse", "DeleteRecordsRequest", "DeleteRecordsResponse",
    "DeleteTopicRequest", "EmptyResponse", "ErrorBody", "FetchCommittedRequest",
    "FetchCommittedResponse", "FetchRequest", "FetchResponse", "ListOffsetsRequest",
    "ListOffsetsResponse", "ListTopicsRequest", "ListTopicsResponse", "MessageLengthRequest",
    "MessageLengthResponse", "MetadataRequest", "MetadataResponse", "ProduceRequest",
    "ProduceResponse", "REQUEST_TYPES", "RESPONSE_TYPES",
]

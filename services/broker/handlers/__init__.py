"""One module per API; `HANDLERS` maps an api number to (supported versions, handle).

Each `handle(ctx, body) -> Reply` reads its own body from the `RequestBody` and raises a
`KaskaError` to answer with an error code; the connection turns either into a frame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from common.kaska.protocol.create_topic import VERSIONS as CREATE_TOPIC_VERSIONS
from common.kaska.protocol.delete_records import VERSIONS as DELETE_RECORDS_VERSIONS
from common.kaska.protocol.delete_topic import VERSIONS as DELETE_TOPIC_VERSIONS
from common.kaska.protocol.frames import VERSION, Api
from common.kaska.protocol.list_topics import VERSIONS as LIST_TOPICS_VERSIONS
from services.broker.handlers import (
    authenticate,
    commit_offset,
    create_topic,
    delete_records,
    delete_topic,
    fetch,
    fetch_committed,
    list_offsets,
    list_topics,
    message_length,
    metadata,
    produce,
    replica_fetch,
    snapshot_fetch,
    vote,
)


@dataclass(frozen=True, slots=True)
class Handler:
    versions: frozenset[int]
    handle: Callable


def _v0(module) -> Handler:
    return Handler(frozenset({VERSION}), module.handle)


HANDLERS: dict[int, Handler] = {
    Api.PRODUCE: _v0(produce),
    Api.FETCH: _v0(fetch),
    Api.LIST_OFFSETS: _v0(list_offsets),
    Api.METADATA: _v0(metadata),
    Api.CREATE_TOPIC: Handler(CREATE_TOPIC_VERSIONS, create_topic.handle),
    Api.DELETE_TOPIC: Handler(DELETE_TOPIC_VERSIONS, delete_topic.handle),
    Api.LIST_TOPICS: Handler(LIST_TOPICS_VERSIONS, list_topics.handle),
    Api.MESSAGE_LENGTH: _v0(message_length),
    Api.COMMIT_OFFSET: _v0(commit_offset),
    Api.FETCH_COMMITTED: _v0(fetch_committed),
    Api.AUTHENTICATE: _v0(authenticate),
    Api.DELETE_RECORDS: Handler(DELETE_RECORDS_VERSIONS, delete_records.handle),
    Api.VOTE: _v0(vote),
    Api.REPLICA_FETCH: _v0(replica_fetch),
    Api.SNAPSHOT_FETCH: _v0(snapshot_fetch),
}
assert set(HANDLERS) == set(Api)

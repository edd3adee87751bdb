"""Kaska's error taxonomy: one base error, a `retriable` flag, and a wire code for each class.

Modelled on aiokafka's errors: the broker answers every failed request with a code; the client
maps the code back to the class with `error_for_code` and retries only the retriable ones.
"""

from __future__ import annotations


class KaskaError(Exception):
    """Base of every Kaska error. `code` travels on the wire; `retriable` drives client retries."""

    code = -1
    retriable = False
    # "host:port" of the leader a NOT_LEADER answer points to; "" when none is known. Set on
    # the instance: by the broker that refuses, and by the client from the answer's ErrorBody.
    leader: str = ""
    # Set by the client's retry loop on the error it finally raises: an earlier attempt may
    # have reached the broker and been applied (a producer must not reuse its sequence).
    maybe_delivered: bool = False


class UnknownServerError(KaskaError):
    code = -1


class CorruptBatchError(KaskaError):
    """A record batch whose length, header or CRC32C does not hold."""

    code = 2


class UnknownTopicOrPartitionError(KaskaError):
    code = 3
    retriable = True


class OffsetOutOfRangeError(KaskaError):
    code = 1


class NotLeaderError(KaskaError):
    """This broker does not lead the partition; the answer names the leader when it knows it."""

    code = 6
    retriable = True


class RequestTimedOutError(KaskaError):
    code = 7
    retriable = True


class BrokerUnavailableError(KaskaError):
    """No broker of the bootstrap list answered (client side only; never sent on the wire)."""

    code = 8
    retriable = True


class MessageTooLargeError(KaskaError):
    code = 10


class FrameTooLargeError(KaskaError):
    """A request frame above the broker's `frame_bytes_max`; the connection is closed after it."""

    code = 11


class InvalidRequestError(KaskaError):
    """A body that does not parse, or an unknown api or version."""

    code = 42


class InvalidResponseError(KaskaError):
    """A response the client cannot parse (client side only; the connection is dropped)."""

    code = 43
    retriable = True


class UnsupportedVersionError(KaskaError):
    code = 35


class InvalidTopicError(KaskaError):
    """A topic name that is empty, too long, or holds `/`, `..`, NUL or other unsafe characters."""

    code = 17


class TopicAlreadyExistsError(KaskaError):
    code = 36


class UnknownTopicIdError(KaskaError):
    """A request naming a topic's incarnation (topic id) while another incarnation of that name
    is live: nothing was done to it (Kafka's UNKNOWN_TOPIC_ID). Not retriable: the incarnation
    asked for is gone for good."""

    code = 100


class NotEnoughReplicasError(KaskaError):
    """A majority did not confirm the write in time, or the broker stopped leading meanwhile."""

    code = 19
    retriable = True


class DuplicateSequenceError(KaskaError):
    """A sequence number older than the producer window the broker remembers."""

    code = 46


class OutOfOrderSequenceError(KaskaError):
    """A gap in a producer's sequence numbers: a batch in between was never stored."""

    code = 45


class AuthenticationError(KaskaError):
    code = 58


class ConnectionLostError(KaskaError):
    """The connection broke with this request in flight (client side only)."""

    code = 9
    retriable = True


class LeaderMovedError(KaskaError):
    """The broker a request waits on stays silent while another broker names a newer leader
    (a higher epoch): a frozen or cut-off leader (client side only; never sent on the wire).
    The request may still be applied there later, so it counts as maybe delivered; its retry
    goes to the new leader, where idempotence finds it if it was."""

    code = 1001
    retriable = True


class InvalidPartitionsError(KaskaError):
    """A partition count outside what the broker accepts (create topic)."""

    code = 37


class UnknownReplicaError(KaskaError):
    """A replication request (vote, replica fetch) from a node id that is not a configured
    peer: a misconfigured cluster, which retrying cannot mend."""

    code = 47


class StaleEpochError(KaskaError):
    """A replication request carrying an epoch older than the receiver's: the sender was
    deposed and must adopt the newer epoch first (Kafka's FENCED_LEADER_EPOCH)."""

    code = 48


class OffsetNotAvailableError(KaskaError):
    """The offset is in the leader's log but above its high watermark (e.g. just after a
    failover, until the new leader's commit catches up): not readable yet, so wait and retry."""

    code = 49
    retriable = True


class KaskaStorageError(KaskaError):
    """The broker could not store the request's data (Kafka's KAFKA_STORAGE_ERROR): its disk is
    full or over quota. Nothing of the request was kept; reads are still served, and writes
    succeed again once space is freed, so wait and retry."""

    code = 56
    retriable = True


NONE = 0

_BY_CODE: dict[int, type[KaskaError]] = {}
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, KaskaError) and _cls is not KaskaError:
        assert _cls.code not in _BY_CODE or _cls is UnknownServerError, _cls
        _BY_CODE.setdefault(_cls.code, _cls)


def error_for_code(code: int) -> type[KaskaError]:
    """The error class for a wire code (UnknownServerError for codes this client does not know)."""
    assert code != NONE, "code 0 means success"
    return _BY_CODE.get(code, UnknownServerError)

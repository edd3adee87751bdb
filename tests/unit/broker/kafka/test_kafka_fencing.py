"""The client's current leader epoch against the broker's (KIP-320), as Kafka's brokers check
it: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 checks nothing."""

import pytest

from services.broker.kafka.errors import FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, kafka_code
from services.broker.kafka.fencing import (
    NO_EPOCH,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    check_current_epoch,
)


@pytest.mark.parametrize("client_epoch", [NO_EPOCH, 7])
def test_no_epoch_or_the_same_epoch_passes(client_epoch):
    assert check_current_epoch("t/0", broker_epoch=7, client_epoch=client_epoch) is None


@pytest.mark.parametrize(
    ("client_epoch", "error", "code"),
    [
        (6, FencedLeaderEpochError, FENCED_LEADER_EPOCH),
        (8, UnknownLeaderEpochError, UNKNOWN_LEADER_EPOCH),
    ],
)
def test_an_older_epoch_is_fenced_a_newer_one_unknown(client_epoch, error, code):
    with pytest.raises(error) as refused:
        check_current_epoch("t/0", broker_epoch=7, client_epoch=client_epoch)
    assert kafka_code(refused.value) == code
    assert "t/0" in str(refused.value)

"""Topic names: Kafka's legal set, and no name that could become a path elsewhere."""

import pytest

from common.kaska.errors import InvalidTopicError
from common.kaska.topic_name import is_internal, validate_topic_name


@pytest.mark.parametrize("name", ["a", "flights.0b6f-3c", "A_b-c.d", "x" * 249, "__offsets"])
def test_legal_names_pass(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "/abs", "a\x00b", "x" * 250,
                                  "spa ce", "ü", "a\\b"])
def test_hostile_or_illegal_names_are_refused(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_internal_topics_start_with_two_underscores():
    assert is_internal("__offsets") and not is_internal("_x")

"""Topic-name rules shared by the client and the broker (Kafka's: `[A-Za-z0-9._-]{1,249}`,
never `.` or `..`), so hostile names are refused before they can become a path."""

from __future__ import annotations

import re

from common.kaska.errors import InvalidTopicError

TOPIC_NAME_CHARS_MAX = 249
INTERNAL_TOPIC_PREFIX = "__"
OFFSETS_TOPIC = "__offsets"
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")


def validate_topic_name(name: str) -> str:
    """The name itself when it is legal; InvalidTopicError otherwise."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if len(name) > TOPIC_NAME_CHARS_MAX:
        raise InvalidTopicError(f"topic name has {len(name)} characters, over "
                                f"{TOPIC_NAME_CHARS_MAX}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is reserved")
    if _LEGAL.fullmatch(name) is None:
        raise InvalidTopicError(f"topic name {name[:60]!r} holds characters outside "
                                "[A-Za-z0-9._-]")
    return name


def is_internal(name: str) -> bool:
    return name.startswith(INTERNAL_TOPIC_PREFIX)

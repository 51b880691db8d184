"""Topic and channel names (docs/nsqd-facts.md section 5).

nsqd accepts ``^[.a-zA-Z0-9_-]+(#ephemeral)?$`` and 1 to 64 characters, the
``#ephemeral`` suffix included.
"""

from __future__ import annotations

import re

from .errors import NSQValueError

MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"

# fullmatch, not "$": Python's "$" also matches before a trailing newline, Go's does not.
_NAME_RE = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def is_valid_name(name: str) -> bool:
    """True when nsqd accepts ``name`` as a topic or channel name."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME_LENGTH
        and _NAME_RE.fullmatch(name) is not None
    )


def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)


#: Every rule nsqd applies to a topic or channel name, as the errors state them.
_RULES = (
    f"nsqd takes 1 to {MAX_NAME_LENGTH} characters, the '#ephemeral' suffix included: "
    "letters, digits, '.', '_' and '-', optionally ending in '#ephemeral'"
)
_NOT_ALLOWED_RE = re.compile(r"[^.a-zA-Z0-9_-]")


def _validate(kind: str, name: object) -> str:
    if not isinstance(name, str):
        raise NSQValueError(f"{kind} name must be a str, got {type(name).__name__}: {name!r}")
    if is_valid_name(name):
        return name
    base = name.removesuffix(EPHEMERAL_SUFFIX)
    not_allowed = list(dict.fromkeys(_NOT_ALLOWED_RE.findall(base)))
    if not name:
        problem = "it is empty"
    elif len(name) > MAX_NAME_LENGTH:
        problem = f"it is {len(name)} characters long"
    elif not base:
        problem = "it has nothing before '#ephemeral'"
    else:
        *others, last = map(repr, not_allowed)
        shown = f"{', '.join(others)} and {last}" if others else last
        problem = f"{shown} {'are' if others else 'is'} not allowed"
    raise NSQValueError(f"invalid {kind} name {name!r}: {problem}; {_RULES}")


def validate_topic_name(topic: object) -> str:
    """Return ``topic`` or raise :class:`NSQValueError` saying what is wrong with it."""
    return _validate("topic", topic)


def validate_channel_name(channel: object) -> str:
    """Return ``channel`` or raise :class:`NSQValueError` saying what is wrong with it."""
    return _validate("channel", channel)

"""Task arguments that may be Jinja templates, on the Airflow side only.

Airflow renders a template field's string when the task runs, so an operator checks an
argument when the DAG is parsed only if it is literal (:func:`is_templated` says which),
and a templated one once rendered. A rendered value is text (``"10"``, ``"2.5"``): the
functions here read it as the number it stands for, with the error the literal value
gets. The client never sees a template; this module is the Airflow layer's.
"""

from __future__ import annotations

from typing import Any

from .protocol.errors import NSQValueError
from .protocol.value_checks import is_int

#: Internal to the provider: no public names (the API reference lists this module under
#: Internals; other modules of the provider import from it).
__all__: list[str] = []


def is_templated(value: object) -> bool:
    """True for a string Airflow will render (``{{ ... }}``): check it after rendering."""
    return isinstance(value, str) and "{{" in value


def rendered_count(name: str, value: object) -> int:
    """A count of messages: an int >= 1, or a rendered string of digits.

    :param name: the argument's name, for the error.
    :param value: the value as given or rendered.
    """
    count = value
    if isinstance(value, str) and value.strip().isdigit():
        count = int(value.strip())
    if not is_int(count) or count < 1:  # the error shows the value as given ('0')
        raise NSQValueError(f"{name} must be an int >= 1, got {value!r}")
    return count


def rendered_delay(delay: object) -> Any:
    """A delay as rendered: a string of digits is milliseconds; anything else is returned
    as it is, for the delay's own check (int milliseconds or a ``timedelta``)."""
    if isinstance(delay, str) and delay.strip().isdigit():
        return int(delay.strip())
    return delay

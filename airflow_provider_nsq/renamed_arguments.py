"""Arguments renamed in a release: the old name still works, with a warning that names
the new one (Airflow's ``AirflowProviderDeprecationWarning``, a ``DeprecationWarning``,
as Apache's providers warn about theirs)."""

from __future__ import annotations

import inspect
import warnings
from typing import TypeVar

from airflow.exceptions import AirflowProviderDeprecationWarning

from .protocol.errors import NSQValueError

T = TypeVar("T")


def renamed_argument(
    owner: str, new: tuple[str, T, T], old: tuple[str, T | None], meaning: str
) -> T:
    """The value of an argument that was renamed: the one given under the new name, or
    (deprecated, with a warning) under the old one. Both at once is an error.

    :param owner: the class the arguments were given to (``"NSQSensor"``).
    :param new: the new name, the value given (or its default), and that default.
    :param old: the old name and the value given under it (None: not given).
    :param meaning: what the argument is, for the warning.
    """
    new_name, value, default = new
    old_name, old_value = old
    if old_value is None:
        return value
    if value != default:
        raise NSQValueError(
            f"{owner}: give {new_name} only ({old_name} is its deprecated name), got "
            f"{new_name}={value!r} and {old_name}={old_value!r}"
        )
    warnings.warn(
        f"{owner}({old_name}=...) is deprecated: use {new_name}= ({meaning}; the same values)",
        AirflowProviderDeprecationWarning,
        stacklevel=_callers_level(),
    )
    return old_value


def _callers_level() -> int:
    """The ``stacklevel`` (for a warning issued by the function that calls this) of the
    first frame outside the provider and Airflow: the line of the DAG that built the
    operator, past Airflow's wrappers of ``__init__``."""
    here = inspect.currentframe()
    level, frame = 1, here.f_back if here is not None else None  # the warning's own
    while frame is not None and frame.f_globals.get("__name__", "").startswith(
        ("airflow_provider_nsq.", "airflow.")
    ):
        level, frame = level + 1, frame.f_back
    return level

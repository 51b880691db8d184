"""Settings described once, on the fields of the classes that hold them.

In the spirit of go-nsq's ``Config`` (one struct whose fields carry ``opt``, ``min``,
``max`` and ``default`` tags, and one ``Set(name, value)`` every input goes through): a
dataclass field declared with ``metadata=setting(...)`` carries its kind, bounds, default
and a one-line doc. From that one declaration come:

- the checks of the class that holds it (:func:`check_fields`, from ``__post_init__``),
  each error naming the field;
- reading it from users (:meth:`SettingSource.read`): text from a URI or an option, or a
  JSON value, each turned into the field's type by the same parser
  (:mod:`.values`); unknown names and names a source refuses are errors that
  say so;
- the lists built from it by the places users write settings.

Those places are described by their callers, never here: a :class:`SettingSource` says
which described settings a place takes (every one users may write, except those it
leaves out) and why it refuses some (the one way a setting is refused). The Airflow
connection's extras and form are ``hooks/``'s source, the Spark data source's options
``spark/``'s; a setting added to a class here reaches each of them with no edit there.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...protocol.errors import NSQSettingError, NSQValueError
from ...protocol.value_checks import is_bool, is_int, is_seconds
from .address import parse_addresses
from .values import parse_bool, parse_int, parse_seconds

__all__ = ["JSON_TYPES", "Setting", "SettingSource", "check_fields", "setting", "settings_of"]

Kind = Literal["boolean", "integer", "seconds", "text", "addresses"]
#: The JSON type of each kind, as a JSON schema (a form's) names it.
JSON_TYPES: dict[str, str] = {
    "boolean": "boolean",
    "integer": "integer",
    "seconds": "number",
    "text": "string",
    "addresses": "string",
}

_KEY = "airflow_provider_nsq.setting"


@dataclass(frozen=True)
class Setting:
    """One setting: what it is and what values it takes.

    :param label: a short name for people (a form's label).
    :param doc: one line for users (a form's description).
    :param kind: ``boolean``, ``integer``, ``seconds`` (float > 0), ``text``, or
        ``addresses`` (a comma-separated string or a list, each entry checked by
        ``entry``).
    :param minimum: the smallest value (integers) ...
    :param maximum: ... and the largest (integers, seconds).
    :param special: values allowed outside the bounds, and what each means (``-1``: off).
    :param choices: the only texts allowed (read case-insensitively).
    :param pattern: a regular expression the text must match (``re.search``).
    :param convert: checks a text (for ``addresses``, each entry) and returns it as
        stored (a name validated, an address normalised).
    :param code_only: set from code only, never written by users under its name (the
        address, which users give in their own way; what IDENTIFY says about the client;
        nsqd's delivery tuning): no :class:`SettingSource` takes it.
    :param secret: never shown in errors or reprs.
    :param placeholder: an example the connection form shows in the empty field.
    """

    label: str
    doc: str
    kind: Kind = "text"
    minimum: float | None = None
    maximum: float | None = None
    special: Mapping[int, str] = field(default_factory=dict)
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    convert: Callable[[str], Any] | None = None
    code_only: bool = False
    secret: bool = False
    placeholder: str | None = None
    #: Filled in from the dataclass field: its name, default, and whether None is allowed.
    name: str = ""
    default: Any = None
    nullable: bool = False

    @property
    def json_type(self) -> str:
        return JSON_TYPES[self.kind]

    def expected(self) -> str:
        """The allowed values in words: ``1-9``, ``0 (nsqd's default) or >= 1000``."""
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            span = f"{_number(low)}-{_number(high)}"
        elif low is not None:
            span = f">= {_number(low)}"
        else:
            span = f"<= {_number(high)}"
        if not self.special:
            return span
        named = ", ".join(f"{value} ({meaning})" for value, meaning in self.special.items())
        return f"{named} or {span}"

    def parse(self, value: object) -> Any:
        """``value`` as users write it (text, or the JSON type) as this setting's value.

        :raises NSQValueError: saying what was expected (the caller names the setting).
        """
        if self.kind == "boolean":
            return parse_bool(value)
        if self.kind == "integer":
            return self._bounded(parse_int(value))
        if self.kind == "seconds":
            return self._bounded(parse_seconds(value))
        if self.kind == "addresses":
            return self._addresses(value)
        if self.choices and isinstance(value, str):
            value = value.strip().lower()
        self.check(value)
        if self.convert is not None and isinstance(value, str):
            return self.convert(value)
        return value

    def check(self, value: object) -> None:
        """Check a value already of this setting's type (what ``__post_init__`` sees).

        :raises NSQValueError: saying what was expected.
        """
        if value is None and self.nullable:
            return
        check = _TYPE_CHECKS[self.kind]
        if not check(value):
            raise NSQValueError(f"must be {_TYPE_WORDS[self.kind]}, got {self._shown(value)}")
        if self.kind in ("integer", "seconds"):
            self._bounded(value)  # type: ignore[arg-type]
        elif self.kind == "text":
            self._text(value)  # type: ignore[arg-type]

    def _bounded(self, value: float) -> Any:
        if value in self.special:
            return value
        low, high = self.minimum, self.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            if self.kind == "seconds":
                raise NSQValueError(f"must be at most {_number(high)} seconds, got {value!r}")
            raise NSQValueError(f"must be {self.expected()}, got {value!r}")
        return value

    def _text(self, value: str) -> None:
        if not value.strip():
            raise NSQValueError("must not be empty")
        if self.choices and value not in self.choices:
            raise NSQValueError(
                f"must be one of {', '.join(self.choices)}, got {self._shown(value)}"
            )
        if self.pattern is not None and not re.search(self.pattern, value):
            raise NSQValueError(f"must match {self.pattern} ({self.doc})")

    def _addresses(self, value: object) -> tuple[str, ...]:
        entries = parse_addresses(value, "the value")
        # In order, the same address once (after converting): it would double its share.
        out = tuple(dict.fromkeys(self.convert(e) if self.convert else e for e in entries))
        if not out:
            raise NSQValueError(f"must be a comma-separated list of host:port, got {value!r}")
        return out

    def _shown(self, value: object) -> str:
        return "(hidden)" if self.secret else repr(value)


def _number(value: float | None) -> str:
    """``4150``, ``0.5``: whole numbers without a decimal point or an exponent."""
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)


_TYPE_CHECKS: dict[str, Callable[[object], bool]] = {
    "boolean": is_bool,
    "integer": is_int,
    "seconds": is_seconds,
    "text": lambda v: isinstance(v, str),
    "addresses": lambda v: isinstance(v, tuple) and all(isinstance(a, str) for a in v),
}
_TYPE_WORDS = {
    "boolean": "true or false",
    "integer": "a whole number",
    "seconds": "a number of seconds > 0",
    "text": "a string",
    "addresses": "a tuple of host:port strings",
}


def setting(label: str, doc: str, **description: Any) -> dict[str, Setting]:
    """The ``metadata`` of a dataclass field that is a setting (see :class:`Setting`)."""
    return {_KEY: Setting(label, doc, **description)}


@functools.cache
def settings_of(cls: type) -> dict[str, Setting]:
    """The settings a dataclass declares, by field name, in field order."""
    out: dict[str, Setting] = {}
    for f in dataclasses.fields(cls):
        described = f.metadata.get(_KEY)
        if described is None:
            continue
        default = None if f.default is dataclasses.MISSING else f.default
        out[f.name] = dataclasses.replace(
            described, name=f.name, default=default, nullable=f.default is None
        )
    return out


def check_fields(obj: Any, where: str) -> None:
    """Check every setting field of ``obj`` (from its ``__post_init__``).

    :raises NSQSettingError: naming the field (``where`` prefixes it: ``ClientConfig.``).
    """
    cls: type = obj.__class__
    for name, described in settings_of(cls).items():
        try:
            described.check(getattr(obj, name))
        except NSQValueError as exc:
            raise NSQSettingError(name, str(exc), where) from None


@dataclass(frozen=True)
class SettingSource:
    """A place users write settings, as the caller that reads it describes it (an
    Airflow connection's extras in ``hooks/``, a Spark option set in ``spark/``).

    It takes every described setting users may write (not ``code_only``) except those it
    refuses or leaves out. Refusing is the one way a source turns a setting down with a
    reason; a name it leaves out is merely unknown to it.

    :param refused: name -> why this source does not take it (the error says so); the
        name need not be a described setting (another source's own option, say).
    :param leaves_out: names it does not take and that need no reason.
    """

    refused: Mapping[str, str] = field(default_factory=dict)
    leaves_out: frozenset[str] = frozenset()

    def takes(self, settings: Mapping[str, Setting]) -> dict[str, Setting]:
        """The settings users may write here, in their order."""
        return {
            name: described
            for name, described in settings.items()
            if not described.code_only and name not in self.refused and name not in self.leaves_out
        }

    def read(self, settings: Mapping[str, Setting], given: Mapping[str, object]) -> dict[str, Any]:
        """Read what users wrote here (setting name -> value as written): each value
        parsed by its setting; ``""`` and ``None`` (a blank form field) mean "not set".

        :raises NSQSettingError: naming the setting: one this source does not know (with
            the ones it does), one it refuses (and why), or a bad value.
        """
        known = self.takes(settings)
        out: dict[str, Any] = {}
        for name, value in given.items():
            described = known.get(name)
            if described is None:
                if name in self.refused:
                    raise NSQSettingError(name, f"not supported here: {self.refused[name]}")
                raise NSQSettingError(name, f"unknown; known: {', '.join(sorted(known))}")
            if value is None or value == "":
                continue
            try:
                out[name] = described.parse(value)
            except NSQValueError as exc:
                raise NSQSettingError(name, str(exc)) from None
        return out

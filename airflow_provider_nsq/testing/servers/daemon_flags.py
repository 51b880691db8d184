"""Flag values of the embedded daemons' command lines, read as nsqd and nsqlookupd read
theirs: Go durations (``250ms``, ``1m30s``), Go booleans, and listen addresses whose host
may be empty (``:4150``). Each parser is an ``argparse`` type: a bad value is reported
as ``argument --flag: <why>``. :func:`go_duration` writes a duration back as Go does."""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable
from typing import TypeVar

from airflow_provider_nsq.client.settings.address import parse_address
from airflow_provider_nsq.client.settings.values import parse_bool
from airflow_provider_nsq.protocol.errors import NSQValueError

_T = TypeVar("_T")

_UNITS = {
    "ns": 1e-6,
    "us": 1e-3,
    "µs": 1e-3,
    "ms": 1.0,
    "s": 1000.0,
    "m": 60_000.0,
    "h": 3_600_000.0,
}
_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")


def _flag_type(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    @functools.wraps(parse)
    def parse_flag(text: str) -> _T:
        try:
            return parse(text)
        except NSQValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse_flag


@_flag_type
def duration_ms(text: str) -> int:
    """A Go duration (``1m30s``, ``250ms``) or a plain number of milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise NSQValueError(f"invalid duration {text!r} (e.g. 250ms, 60s, 1h)")
    return int(total)


def go_duration(ms: int) -> str:
    """``ms`` as Go prints a duration (``250ms``, ``45s``, ``1m0s``, ``1h0m0s``): the
    defaults in the help text read as nsqd's own ``-help`` shows them."""
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    seconds, millis = divmod(ms, 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{seconds}.{millis:03d}".rstrip("0") if millis else str(seconds)
    text += "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


@_flag_type
def boolean(text: str) -> bool:
    """``true``/``false`` and the other words Go's strconv.ParseBool takes."""
    return parse_bool(text)


@_flag_type
def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` to listen on, as nsqd and nsqlookupd take it: an empty host
    (``:4150``, every interface there) binds 127.0.0.1 here; port 0 is any free port."""
    value = "127.0.0.1" + text if text.startswith(":") else text
    host, _, port = value.rpartition(":")
    if port == "0":
        return parse_address(host, 1, "listen address")[0], 0
    return parse_address(value, None, "listen address")


def logging_level(flag: str) -> str:
    """The :mod:`logging` level name for a Go daemon's ``--log-level`` value."""
    return {"warn": "WARNING", "fatal": "CRITICAL"}.get(flag, flag.upper())

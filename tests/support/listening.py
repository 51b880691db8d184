"""The ports an embedded daemon started with ``--*-port 0`` listens on, read from its log
as nsqd and nsqlookupd write them (``TCP: listening on 127.0.0.1:4150``): the shape
scripts that start the Go daemons parse (gnsq's test harness does, with this pattern)."""

from __future__ import annotations

import re
from typing import IO

#: gnsq's ``integration_server.py`` pattern for nsqd's and nsqlookupd's listener lines.
LISTENING = re.compile(
    r"(?P<protocol>[A-Z]+): listening on "
    r"(?P<address>(?:[0-9]{1,3}\.){3}[0-9]{1,3}):(?P<port>[0-9]+)"
)


def listening_ports(
    stderr: IO[str], protocols: tuple[str, ...] = ("TCP", "HTTP")
) -> dict[str, int]:
    """``{protocol: port}`` for each of ``protocols``, read line by line from a daemon's
    log; fails naming the lines read when they do not all appear within 40 lines."""
    ports: dict[str, int] = {}
    lines: list[str] = []
    while set(protocols) - set(ports) and len(lines) < 40:  # skip warnings before them
        lines.append(stderr.readline())
        if match := LISTENING.search(lines[-1]):
            ports[match["protocol"]] = int(match["port"])
    assert set(protocols) <= set(ports), lines
    return ports

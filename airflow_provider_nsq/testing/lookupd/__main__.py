"""``python -m airflow_provider_nsq.testing.lookupd``: run the embedded lookupd.

Takes nsqlookupd 1.3.0's own flags (``--tcp-address``, ``--http-address``,
``--broadcast-address``, ``--inactive-producer-timeout``, ``--tombstone-lifetime``,
``--log-level``, ``--version``), so a test setup that starts ``nsqlookupd`` can start
this instead, plus the broker's ``--host`` / ``--tcp-port`` / ``--http-port``. Durations
take Go's syntax (``300s``, ``1m``) or plain milliseconds. ``--help`` gives every flag
with its unit and default. Stops cleanly on SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from airflow_provider_nsq.client.settings.address import (
    DEFAULT_LOOKUPD_HTTP_PORT,
    DEFAULT_LOOKUPD_TCP_PORT,
)

from ..servers.daemon_cli import given, listen_on, new_parser, run_daemon
from ..servers.daemon_flags import duration_ms, go_duration
from .options import (
    DEFAULT_INACTIVE_PRODUCER_TIMEOUT_MS,
    DEFAULT_TOMBSTONE_LIFETIME_MS,
    NSQLOOKUPD_VERSION,
    LookupdOptions,
)
from .server import Lookupd


def build_parser() -> argparse.ArgumentParser:
    """The lookupd's command line: nsqlookupd's flags, each with its unit and default."""
    p = new_parser(
        module="airflow_provider_nsq.testing.lookupd",
        daemon="nsqlookupd",
        version=NSQLOOKUPD_VERSION,
        description="An in-memory nsqlookupd 1.3.0-compatible server for tests and demos.",
        tcp_port=DEFAULT_LOOKUPD_TCP_PORT,
        http_port=DEFAULT_LOOKUPD_HTTP_PORT,
    )
    add = p.add_argument
    add(
        "--broadcast-address",
        metavar="ADDRESS",
        help="address of this lookupd that nsqds are told, and ask for channels "
        f"(default {LookupdOptions.broadcast_address}; nsqlookupd's default is the OS "
        "hostname)",
    )
    add(
        "--inactive-producer-timeout",
        type=duration_ms,
        metavar="DURATION",
        help="hide a producer this long after its last IDENTIFY or PING "
        f"(default {go_duration(DEFAULT_INACTIVE_PRODUCER_TIMEOUT_MS)})",
    )
    add(
        "--tombstone-lifetime",
        type=duration_ms,
        metavar="DURATION",
        help="how long a tombstoned producer stays hidden from /lookup "
        f"(default {go_duration(DEFAULT_TOMBSTONE_LIFETIME_MS)})",
    )
    return p


def options_from_args(args: argparse.Namespace) -> LookupdOptions:
    """The :class:`LookupdOptions` that parsed flags ask for."""
    return LookupdOptions(
        **listen_on(args, DEFAULT_LOOKUPD_TCP_PORT, DEFAULT_LOOKUPD_HTTP_PORT),
        **given(args, ("broadcast-address", "inactive-producer-timeout", "tombstone-lifetime")),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the lookupd until SIGINT or SIGTERM; the exit status."""
    return run_daemon(
        build_parser(), argv, options_from_args, Lookupd, "airflow_provider_nsq.testing.lookupd"
    )


if __name__ == "__main__":
    sys.exit(main())

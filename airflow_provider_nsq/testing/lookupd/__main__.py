"""``python -m airflow_provider_nsq.testing.lookupd``: run the embedded lookupd.

Takes nsqlookupd 1.3.0's own flags (``--tcp-address``, ``--http-address``,
``--broadcast-address``, ``--inactive-producer-timeout``, ``--tombstone-lifetime``,
``--log-level``), so a test setup that starts ``nsqlookupd`` can start this instead, plus
the broker's ``--host`` / ``--tcp-port`` / ``--http-port``. Durations take Go's syntax
(``300s``, ``1m``) or plain milliseconds. Stops cleanly on SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from airflow_provider_nsq.client.address import DEFAULT_LOOKUPD_HTTP_PORT, DEFAULT_LOOKUPD_TCP_PORT

from ..servers.daemon_flags import duration_ms, listen_address, logging_level
from ..servers.lifecycle import serve_until_signalled
from .options import NSQLOOKUPD_VERSION, LookupdOptions
from .server import Lookupd

log = logging.getLogger("airflow_provider_nsq.testing.lookupd")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m airflow_provider_nsq.testing.lookupd",
        description="An in-memory nsqlookupd 1.3.0-compatible server for tests and demos.",
    )
    add = p.add_argument
    add("--host", default=None, help="address to bind (default 127.0.0.1)")
    add("--tcp-port", type=int, default=None, help="TCP port (default 4160; 0 = free port)")
    add("--http-port", type=int, default=None, help="HTTP port (default 4161; 0 = free port)")
    add(
        "--tcp-address",
        type=listen_address,
        default=None,
        help="HOST:PORT for nsqds, as nsqlookupd",
    )
    add("--http-address", type=listen_address, default=None, help="HOST:PORT for HTTP clients")
    add(
        "--broadcast-address",
        default=None,
        help="address of this lookupd that nsqds are told (default 127.0.0.1; "
        "nsqlookupd's default is the OS hostname)",
    )
    add(
        "--inactive-producer-timeout",
        type=duration_ms,
        default=None,
        metavar="DURATION",
        help="hide a producer this long after its last IDENTIFY or PING (default 300s)",
    )
    add(
        "--tombstone-lifetime",
        type=duration_ms,
        default=None,
        metavar="DURATION",
        help="how long a tombstoned producer stays hidden from /lookup (default 45s)",
    )
    add(
        "--log-level",
        default="info",
        choices=["debug", "info", "warn", "warning", "error", "fatal"],
    )
    add("--log-prefix", default=None, help="accepted for nsqlookupd compatibility; unused")
    add("--version", action="store_true", help="print the version and exit")
    return p


def options_from_args(args: argparse.Namespace) -> LookupdOptions:
    host = args.host
    tcp_port = DEFAULT_LOOKUPD_TCP_PORT if args.tcp_port is None else args.tcp_port
    http_port = DEFAULT_LOOKUPD_HTTP_PORT if args.http_port is None else args.http_port
    if args.tcp_address is not None:
        host = host or args.tcp_address[0]
        tcp_port = args.tcp_address[1] if args.tcp_port is None else tcp_port
    if args.http_address is not None:
        host = host or args.http_address[0]
        http_port = args.http_address[1] if args.http_port is None else http_port
    kwargs: dict[str, object] = {
        "host": host or "127.0.0.1",
        "tcp_port": tcp_port,
        "http_port": http_port,
    }
    for name in ("broadcast_address", "inactive_producer_timeout", "tombstone_lifetime"):
        value = getattr(args, name)
        if value is not None:
            kwargs[name] = value
    return LookupdOptions(**kwargs)  # type: ignore[arg-type]


async def serve(options: LookupdOptions) -> None:
    """Run until SIGINT or SIGTERM."""
    await serve_until_signalled(Lookupd(options))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"nsqlookupd-compatible lookupd v{NSQLOOKUPD_VERSION} (airflow-provider-nsq)")
        return 0
    logging.basicConfig(
        level=logging_level(args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        options = options_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        asyncio.run(serve(options))
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m airflow_provider_nsq.testing.broker``: run the embedded broker.

Flags use nsqd's names (``--max-msg-size``, ``--msg-timeout=60s``, ``--tls-cert``,
``--auth-http-address`` ...); durations take Go's syntax (``250ms``, ``60s``, ``1h``)
or plain milliseconds. Stops cleanly on SIGINT / SIGTERM. Not a production broker.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence

from airflow_provider_nsq.client.address import DEFAULT_NSQD_HTTP_PORT, DEFAULT_NSQD_TCP_PORT

from ..servers.daemon_flags import boolean, duration_ms, listen_address, logging_level
from ..servers.lifecycle import serve_until_signalled
from .options import BrokerOptions
from .server import Broker


def _tls_required(text: str) -> bool | str:
    if text.strip().lower() == "tcp-https":
        return "tcp-https"
    return boolean(text)


#: nsqd's limits given as whole numbers, and as Go durations.
_INT_FLAGS = (
    "max-msg-size",
    "max-body-size",
    "max-rdy-count",
    "max-output-buffer-size",
    "max-deflate-level",
    "max-channel-consumers",
    "mem-queue-size",
)
_DURATION_FLAGS = (
    "max-req-timeout",
    "msg-timeout",
    "max-msg-timeout",
    "max-heartbeat-interval",
    "max-output-buffer-timeout",
    "min-output-buffer-timeout",
    "output-buffer-timeout",
    "http-client-connect-timeout",
    "http-client-request-timeout",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m airflow_provider_nsq.testing.broker",
        description="An in-memory nsqd 1.3.0-compatible broker for tests and demos "
        "(not for production: no disk persistence).",
    )
    _add_listeners(p.add_argument)
    add = p.add_argument
    for flag in _INT_FLAGS:
        add(f"--{flag}", type=int, default=None)
    for flag in _DURATION_FLAGS:
        add(f"--{flag}", type=duration_ms, default=None, metavar="DURATION")
    for flag in ("deflate", "snappy"):
        add(f"--{flag}", type=boolean, nargs="?", const=True, default=None, metavar="BOOL")
    _add_tls_and_auth(add)
    add(
        "--lookupd-tcp-address",
        action="append",
        default=None,
        help="nsqlookupd TCP HOST:PORT to register with (repeatable)",
    )
    add("--broadcast-tcp-port", type=int, default=None, help="TCP port told to lookupds")
    add("--broadcast-http-port", type=int, default=None, help="HTTP port told to lookupds")
    add("--log-level", default="info", choices=["debug", "info", "warn", "warning", "error"])
    return p


def _add_listeners(add: Callable[..., object]) -> None:
    add("--host", default=None, help="address to bind (default 127.0.0.1)")
    add("--tcp-port", type=int, default=None, help="TCP port (default 4150; 0 = free port)")
    add("--http-port", type=int, default=None, help="HTTP port (default 4151; 0 = free port)")
    add("--https-port", type=int, default=None, help="HTTPS port, with --tls-cert (default: free)")
    add("--tcp-address", type=listen_address, default=None, help="HOST:PORT, as nsqd's flag")
    add("--http-address", type=listen_address, default=None, help="HOST:PORT, as nsqd's flag")
    add("--https-address", type=listen_address, default=None, help="HOST:PORT, as nsqd's flag")
    add("--broadcast-address", default="127.0.0.1")


def _add_tls_and_auth(add: Callable[..., object]) -> None:
    add("--tls-cert", default=None)
    add("--tls-key", default=None)
    add("--tls-root-ca-file", default=None)
    add(
        "--tls-required",
        type=_tls_required,
        nargs="?",
        const=True,
        default=None,
        metavar="true|false|tcp-https",
    )
    add("--tls-client-auth-policy", default=None, choices=["", "require", "require-verify"])
    add("--tls-min-version", default=None, choices=["tls1.0", "tls1.1", "tls1.2", "tls1.3"])
    add(
        "--auth-http-address",
        action="append",
        default=None,
        help="nsqd-style auth server HOST:PORT or URL (repeatable)",
    )


def options_from_args(args: argparse.Namespace) -> BrokerOptions:
    kwargs: dict[str, object] = {}
    host = args.host
    tcp_port = DEFAULT_NSQD_TCP_PORT if args.tcp_port is None else args.tcp_port
    http_port = DEFAULT_NSQD_HTTP_PORT if args.http_port is None else args.http_port
    if args.tcp_address is not None:
        host = host or args.tcp_address[0]
        tcp_port = args.tcp_address[1] if args.tcp_port is None else tcp_port
    if args.http_address is not None:
        http_port = args.http_address[1] if args.http_port is None else http_port
    if args.https_address is not None and args.https_port is None:
        kwargs["https_port"] = args.https_address[1]
    elif args.https_port is not None:
        kwargs["https_port"] = args.https_port
    kwargs.update(host=host or "127.0.0.1", tcp_port=tcp_port, http_port=http_port)
    for name in (
        "broadcast_address",
        "max_msg_size",
        "max_body_size",
        "max_rdy_count",
        "max_output_buffer_size",
        "max_deflate_level",
        "max_channel_consumers",
        "mem_queue_size",
        "max_req_timeout",
        "msg_timeout",
        "max_msg_timeout",
        "max_heartbeat_interval",
        "max_output_buffer_timeout",
        "min_output_buffer_timeout",
        "output_buffer_timeout",
        "http_client_connect_timeout",
        "http_client_request_timeout",
        "deflate",
        "snappy",
        "tls_cert",
        "tls_key",
        "tls_root_ca_file",
        "tls_required",
        "tls_client_auth_policy",
        "tls_min_version",
        "auth_http_address",
        "broadcast_tcp_port",
        "broadcast_http_port",
    ):
        value = getattr(args, name)
        if value is not None:
            kwargs[name] = value
    if args.lookupd_tcp_address:
        kwargs["lookupd_tcp_addresses"] = args.lookupd_tcp_address
    return BrokerOptions(**kwargs)  # type: ignore[arg-type]


async def serve(options: BrokerOptions) -> None:
    """Run until SIGINT or SIGTERM."""
    await serve_until_signalled(Broker(options))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging_level(args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        options = options_from_args(args)
    except ValueError as exc:
        build_parser().error(str(exc))
    try:
        asyncio.run(serve(options))
    except OSError as exc:
        logging.getLogger("airflow_provider_nsq.testing.broker").error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

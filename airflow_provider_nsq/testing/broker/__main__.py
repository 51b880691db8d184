"""``python -m airflow_provider_nsq.testing.broker``: run the embedded broker.

Flags use nsqd's names (``--max-msg-size``, ``--msg-timeout=60s``, ``--tls-cert``,
``--auth-http-address`` ...); durations take Go's syntax (``250ms``, ``60s``, ``1h``)
or plain milliseconds. ``--help`` gives every flag with its unit and default;
``--version`` prints nsqd's version line. Stops cleanly on SIGINT / SIGTERM. Not a
production broker.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from airflow_provider_nsq.client.settings.address import (
    DEFAULT_NSQD_HTTP_PORT,
    DEFAULT_NSQD_TCP_PORT,
)

from ..servers.daemon_cli import given, listen_on, new_parser, run_daemon
from ..servers.daemon_flags import boolean, duration_ms, go_duration, listen_address
from .options import NSQD_VERSION, BrokerOptions
from .server import Broker

#: BrokerOptions' defaults: nsqd 1.3.0's, shown in the help text.
_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(BrokerOptions)
    if f.default is not dataclasses.MISSING
}

#: nsqd's limits given as whole numbers: flag, unit, what it bounds.
_NUMBER_FLAGS = (
    ("max-msg-size", "BYTES", "largest message body a PUB, DPUB or MPUB may carry"),
    ("max-body-size", "BYTES", "largest command body (a whole MPUB)"),
    ("max-rdy-count", "COUNT", "largest RDY count a client may send"),
    ("max-output-buffer-size", "BYTES", "largest output buffer a client may ask for"),
    ("max-deflate-level", "LEVEL", "highest deflate level (1-9) a client may ask for"),
    ("max-channel-consumers", "COUNT", "most consumers of one channel, 0 for no limit"),
    (
        "mem-queue-size",
        "COUNT",
        "messages a topic or channel holds, a hard bound here with no disk to spill "
        "to; nsqd holds 10000, then writes to disk",
    ),
)
#: nsqd's flags given as Go durations: flag, what it sets.
_DURATION_FLAGS = (
    ("max-req-timeout", "longest delay a REQ may ask for"),
    ("msg-timeout", "how long a message stays in flight before nsqd requeues it"),
    ("max-msg-timeout", "longest msg_timeout a client may ask for in IDENTIFY"),
    ("max-heartbeat-interval", "longest heartbeat interval a client may ask for"),
    ("max-output-buffer-timeout", "longest output buffer timeout a client may ask for"),
    ("min-output-buffer-timeout", "shortest output buffer timeout a client may ask for"),
    ("output-buffer-timeout", "how long a client's output is buffered before a flush"),
    (
        "http-client-connect-timeout",
        "time to connect to an auth server or a lookupd's HTTP API",
    ),
    (
        "http-client-request-timeout",
        "time for one request to an auth server or a lookupd's HTTP API, once connected",
    ),
)


def _default(flag: str) -> Any:
    return _DEFAULTS[flag.replace("-", "_")]


def _tls_required(text: str) -> bool | str:
    if text.strip().lower() == "tcp-https":
        return "tcp-https"
    return boolean(text)


def build_parser() -> argparse.ArgumentParser:
    """The broker's command line: nsqd's flags, each with its unit and default."""
    p = new_parser(
        module="airflow_provider_nsq.testing.broker",
        daemon="nsqd",
        version=NSQD_VERSION,
        description="An in-memory nsqd 1.3.0-compatible broker for tests and demos "
        "(not for production: no disk persistence).",
        tcp_port=DEFAULT_NSQD_TCP_PORT,
        http_port=DEFAULT_NSQD_HTTP_PORT,
    )
    add = p.add_argument
    add(
        "--https-port",
        type=int,
        metavar="PORT",
        help="HTTPS port, served when --tls-cert is given; 0 picks a free one "
        "(default a free port; wins over --https-address)",
    )
    add(
        "--https-address",
        type=listen_address,
        metavar="HOST:PORT",
        help="HTTPS listen address, as nsqd's flag; only its port is used, the host is "
        "--host's (default a free port)",
    )
    add(
        "--data-path",
        metavar="PATH",
        help="accepted for nsqd compatibility and ignored: nothing is written to disk "
        "(default none)",
    )
    for flag, unit, what in _NUMBER_FLAGS:
        in_unit = ", in bytes" if unit == "BYTES" else ""
        add(
            f"--{flag}",
            type=int,
            metavar=unit,
            help=f"{what}{in_unit} (default {_default(flag)})",
        )
    for flag, what in _DURATION_FLAGS:
        add(
            f"--{flag}",
            type=duration_ms,
            metavar="DURATION",
            help=f"{what} (default {go_duration(_default(flag))})",
        )
    for flag, feature in (("deflate", "deflate"), ("snappy", "snappy")):
        add(
            f"--{flag}",
            type=boolean,
            nargs="?",
            const=True,
            metavar="BOOL",
            help=f"offer {feature} compression to clients that ask for it in IDENTIFY; "
            f"alone it means true (default true)",
        )
    _add_tls_and_auth(add)
    _add_registration(add)
    return p


def _add_tls_and_auth(add: Any) -> None:
    add(
        "--tls-cert",
        metavar="PATH",
        help="server certificate (PEM) for TLS on TCP and for HTTPS; with --tls-key "
        "(default none: no TLS)",
    )
    add("--tls-key", metavar="PATH", help="the certificate's private key, PEM (default none)")
    add(
        "--tls-root-ca-file",
        metavar="PATH",
        help="CA certificates (PEM) that client certificates are verified against "
        "(default the system's CAs)",
    )
    add(
        "--tls-required",
        type=_tls_required,
        nargs="?",
        const=True,
        metavar="true|false|tcp-https",
        help="refuse clients that do not upgrade to TLS: true (TCP and HTTP), tcp-https "
        "(TCP only), false; alone it means true (default false)",
    )
    add(
        "--tls-client-auth-policy",
        choices=["", "require", "require-verify"],
        metavar="POLICY",
        help="ask TLS clients for a certificate: require or require-verify (both verify "
        "it here); implies --tls-required (default none)",
    )
    add(
        "--tls-min-version",
        choices=["tls1.0", "tls1.1", "tls1.2", "tls1.3"],
        metavar="VERSION",
        help=f"oldest TLS version accepted: tls1.0, tls1.1, tls1.2 or tls1.3 "
        f"(default {_default('tls-min-version')})",
    )
    add(
        "--auth-http-address",
        action="append",
        metavar="HOST:PORT|URL",
        help="nsqd-style auth server to ask about AUTH secrets; repeatable (default "
        "none: AUTH off)",
    )


def _add_registration(add: Any) -> None:
    add(
        "--lookupd-tcp-address",
        action="append",
        metavar="HOST:PORT",
        help="nsqlookupd TCP address to register topics and channels with; repeatable "
        "(default none)",
    )
    add(
        "--broadcast-address",
        metavar="ADDRESS",
        help=f"address lookupds hand out for this broker (default "
        f"{_default('broadcast-address')}; nsqd's default is the OS hostname)",
    )
    add(
        "--broadcast-tcp-port",
        type=int,
        metavar="PORT",
        help="TCP port lookupds hand out (default the TCP port listened on)",
    )
    add(
        "--broadcast-http-port",
        type=int,
        metavar="PORT",
        help="HTTP port lookupds hand out (default the HTTP port listened on)",
    )


#: Flags passed to BrokerOptions as they are, when given.
_OPTION_FLAGS = (
    *(flag for flag, _, _ in _NUMBER_FLAGS),
    *(flag for flag, _ in _DURATION_FLAGS),
    "deflate",
    "snappy",
    "tls-cert",
    "tls-key",
    "tls-root-ca-file",
    "tls-required",
    "tls-client-auth-policy",
    "tls-min-version",
    "auth-http-address",
    "broadcast-address",
    "broadcast-tcp-port",
    "broadcast-http-port",
)


def options_from_args(args: argparse.Namespace) -> BrokerOptions:
    """The :class:`BrokerOptions` that parsed flags ask for."""
    kwargs = listen_on(args, DEFAULT_NSQD_TCP_PORT, DEFAULT_NSQD_HTTP_PORT)
    if args.https_port is not None:
        kwargs["https_port"] = args.https_port
    elif args.https_address is not None:
        kwargs["https_port"] = args.https_address[1]
    if args.lookupd_tcp_address:
        kwargs["lookupd_tcp_addresses"] = args.lookupd_tcp_address
    return BrokerOptions(**kwargs, **given(args, _OPTION_FLAGS))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the broker until SIGINT or SIGTERM; the exit status."""
    return run_daemon(
        build_parser(), argv, options_from_args, Broker, "airflow_provider_nsq.testing.broker"
    )


if __name__ == "__main__":
    sys.exit(main())

"""What the embedded daemons' command lines share: ``python -m ...broker`` and
``python -m ...lookupd`` take their Go daemon's flag names, print their version as it
does, and run in the foreground until SIGINT or SIGTERM.

- :func:`new_parser`: a parser with the flags both daemons have (where to listen,
  logging, ``--version``), each with its help text, unit and default;
- :func:`listen_on`: the host and ports those flags ask for; :func:`given`: the other
  flags given, as keyword arguments;
- :func:`run_daemon`: logging set up, the daemon built from the parsed flags and served
  until a signal; the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ... import __version__
from .daemon_flags import listen_address, logging_level
from .lifecycle import AsyncService, serve_until_signalled

_O = TypeVar("_O")

#: A DURATION flag's value, as the help text explains it once.
DURATION_HELP = (
    "DURATION is a Go duration (250ms, 60s, 1m30s, 1h; units ns, us, ms, s, m, h) "
    "or a plain number of milliseconds."
)
LOG_LEVELS = ["debug", "info", "warn", "warning", "error", "fatal"]


def version_line(daemon: str, version: str) -> str:
    """What ``--version`` prints, shaped as the Go daemon's ``-version`` line
    (``nsqd v1.3.0 (built w/go1.19.8)``): the daemon imitated and its version first, then
    what it is built with as one word of lowercase letters, digits, dots and dashes, as
    the scripts that parse nsqd's line expect (gnsq's test suite does)."""
    built = f"python{platform.python_version()}-airflow-provider-nsq-{__version__}".lower()
    return f"{daemon} v{version} (built w/{built.replace('+', '.')})"


def new_parser(
    *, module: str, daemon: str, version: str, description: str, tcp_port: int, http_port: int
) -> argparse.ArgumentParser:
    """A parser for ``python -m module`` with the listener, logging and version flags.

    :param daemon: the Go daemon imitated (``nsqd``, ``nsqlookupd``): its name in the help
        text and the version line.
    :param tcp_port: the default TCP port (4150 for nsqd, 4160 for nsqlookupd).
    :param http_port: the default HTTP port.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=description, epilog=DURATION_HELP
    )
    add = parser.add_argument
    add(
        "--version",
        "-version",
        action="version",
        version=version_line(daemon, version),
        help=f"print the version line, as {daemon} -version does, and exit",
    )
    add(
        "--host",
        metavar="HOST",
        help="address every listener binds (default the host of --tcp-address, else "
        "of --http-address, else 127.0.0.1)",
    )
    add(
        "--tcp-port",
        type=int,
        metavar="PORT",
        help=f"TCP port; 0 picks a free one (default {tcp_port}; wins over --tcp-address)",
    )
    add(
        "--http-port",
        type=int,
        metavar="PORT",
        help=f"HTTP port; 0 picks a free one (default {http_port}; wins over --http-address)",
    )
    add(
        "--tcp-address",
        type=listen_address,
        metavar="HOST:PORT",
        help=f"TCP listen address, as {daemon}'s flag; an empty host (:{tcp_port}) binds "
        f"127.0.0.1 (default 127.0.0.1:{tcp_port})",
    )
    add(
        "--http-address",
        type=listen_address,
        metavar="HOST:PORT",
        help=f"HTTP listen address, as {daemon}'s flag; an empty host binds 127.0.0.1 "
        f"(default 127.0.0.1:{http_port})",
    )
    add(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help="least severe level logged: debug, info, warn, error or fatal (default info)",
    )
    add(
        "--log-prefix",
        metavar="PREFIX",
        help=f"accepted for {daemon} compatibility and ignored (default none)",
    )
    return parser


def listen_on(args: argparse.Namespace, tcp_port: int, http_port: int) -> dict[str, Any]:
    """``host``, ``tcp_port`` and ``http_port`` as the parsed flags ask for them
    (``--host`` and the ``--*-port`` flags win over the ``--*-address`` ones)."""
    host = args.host
    tcp, http = args.tcp_port, args.http_port
    if args.tcp_address is not None:
        host = host or args.tcp_address[0]
        tcp = args.tcp_address[1] if tcp is None else tcp
    if args.http_address is not None:
        host = host or args.http_address[0]
        http = args.http_address[1] if http is None else http
    return {
        "host": host or "127.0.0.1",
        "tcp_port": tcp_port if tcp is None else tcp,
        "http_port": http_port if http is None else http,
    }


def given(args: argparse.Namespace, flags: Iterable[str]) -> dict[str, Any]:
    """The ``flags`` given on the command line, as the daemon's keyword arguments
    (``--max-msg-size`` becomes ``max_msg_size``); flags left out keep the defaults."""
    found = {flag.replace("-", "_") for flag in flags}
    return {name: value for name in found if (value := getattr(args, name)) is not None}


def run_daemon(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    options: Callable[[argparse.Namespace], _O],
    daemon: Callable[[_O], AsyncService],
    logger: str,
) -> int:
    """Parse ``argv``, set up logging, then serve ``daemon(options(args))`` until SIGINT
    or SIGTERM. Returns 0, or 1 when the daemon cannot start (a port in use); bad flags
    exit with argparse's status 2."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging_level(args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = options(args)
    except ValueError as exc:
        parser.error(str(exc))

    async def serve() -> None:
        await serve_until_signalled(daemon(settings))

    try:
        asyncio.run(serve())
    except OSError as exc:
        logging.getLogger(logger).error("cannot start: %s", exc)
        return 1
    return 0

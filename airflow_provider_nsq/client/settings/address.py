"""``host:port`` text: parsing and formatting, the one place that knows the rules.

``[::1]:4150`` for IPv6 (brackets required when a port follows); a bare host takes the
caller's default port. Used for nsqd TCP addresses, nsqd HTTP addresses and nsqlookupd
HTTP addresses alike, one at a time (:func:`parse_address`) or as a list
(:func:`parse_addresses`: a comma-separated string or a list of strings). An nsqd's TCP
address is stored in one form, ``host:port`` (:func:`nsqd_tcp_address`,
:func:`nsqd_tcp_addresses`), so the same nsqd written two ways is one nsqd.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...protocol.errors import NSQValueError

__all__ = [
    "DEFAULT_LOOKUPD_HTTP_PORT",
    "DEFAULT_LOOKUPD_TCP_PORT",
    "DEFAULT_NSQD_HTTP_PORT",
    "DEFAULT_NSQD_TCP_PORT",
    "LookupdAddress",
    "format_address",
    "nsqd_tcp_address",
    "nsqd_tcp_addresses",
    "parse_address",
    "parse_addresses",
    "parse_lookupd_address",
]

#: nsqd's default TCP port (--tcp-address 0.0.0.0:4150).
DEFAULT_NSQD_TCP_PORT = 4150
#: nsqd's default HTTP port (--http-address 0.0.0.0:4151).
DEFAULT_NSQD_HTTP_PORT = 4151
#: nsqlookupd's default TCP port (--tcp-address 0.0.0.0:4160), where nsqds register.
DEFAULT_LOOKUPD_TCP_PORT = 4160
#: nsqlookupd's default HTTP port (--http-address 0.0.0.0:4161).
DEFAULT_LOOKUPD_HTTP_PORT = 4161


def parse_address(raw: object, default_port: int | None, what: str = "address") -> tuple[str, int]:
    """``(host, port)`` from ``host:port``, ``[v6]:port``, ``host`` or ``v6``.

    ``default_port`` is used when no port is given (``None``: a port is required).
    Errors are :class:`NSQValueError` naming ``what`` and the text.
    """
    if not isinstance(raw, str):
        raise NSQValueError(f"{what} must be a host:port string, got {type(raw).__name__}")
    text = raw.strip()
    example = f"e.g. 127.0.0.1:{default_port or DEFAULT_NSQD_TCP_PORT}"
    if not text:
        raise NSQValueError(f"{what} is empty: expected host:port, {example}")
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and text[end + 1] != ":"):
            raise NSQValueError(f"{what} {raw!r}: expected [ipv6]:port")
        host, port_text = text[1:end], text[end + 2 :]
        if end + 1 < len(text) and not port_text:
            raise NSQValueError(f"{what} {raw!r}: the port after ':' is missing")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        if not port_text:
            raise NSQValueError(f"{what} {raw!r}: the port after ':' is missing")
    elif ":" in text:
        if default_port is None:
            raise NSQValueError(f"{what} {raw!r}: write an IPv6 address in brackets, [::1]:PORT")
        host = text  # a bare IPv6 address
    if not host or "/" in host or any(c.isspace() for c in host):
        raise NSQValueError(f"{what} {raw!r} is not host:port, {example}")
    if not port_text:
        if default_port is None:
            raise NSQValueError(f"{what} {raw!r} has no port: expected host:port, {example}")
        return host, default_port
    if not port_text.isdigit():
        raise NSQValueError(f"{what} {raw!r}: the port must be a number")
    port = int(port_text)
    if not 0 < port < 65536:
        raise NSQValueError(f"{what} {raw!r}: the port must be 1-65535")
    return host, port


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_addresses(raw: object, what: str) -> list[str]:
    """Addresses from a comma-separated string or a list of strings: each stripped,
    empty ones dropped, in order, each once (the first stays). Each is kept as written;
    :func:`nsqd_tcp_addresses` also parses and normalises them.

    :param raw: ``"a:4150, b:4150"`` or ``["a:4150", "b:4150"]``.
    :param what: what the list is, for errors (``"lookupd_http_addresses"``).
    :raises NSQValueError: naming ``what`` when ``raw`` or an entry is not text.
    """
    if isinstance(raw, str):
        items: Iterable[object] = raw.split(",")
    elif isinstance(raw, (list, tuple)):
        items = raw
    else:
        raise NSQValueError(f"{what} must be a comma-separated string or a list, got {raw!r}")
    out: dict[str, None] = {}
    for item in items:
        if not isinstance(item, str):
            raise NSQValueError(f"{what} entries must be strings, got {item!r}")
        if item.strip():
            out[item.strip()] = None
    return list(out)


def nsqd_tcp_address(raw: object, what: str = "nsqd TCP address") -> str:
    """One nsqd's TCP address as stored: ``host:port`` (``[v6]:port``; a bare host means
    nsqd's port 4150).

    :raises NSQValueError: naming ``what`` and the text.
    """
    return format_address(*parse_address(raw, DEFAULT_NSQD_TCP_PORT, what))


def nsqd_tcp_addresses(raw: object, what: str = "nsqd_tcp_addresses") -> list[str]:
    """nsqds' TCP addresses (:func:`parse_addresses`), each as :func:`nsqd_tcp_address`
    stores it, in order, each nsqd once however it was written (``nsqd`` and
    ``nsqd:4150`` are one).

    :raises NSQValueError: naming ``what`` (``"<what> entry"`` for a bad entry).
    """
    entries = parse_addresses(raw, what)
    return list(dict.fromkeys(nsqd_tcp_address(e, f"{what} entry") for e in entries))


@dataclass(frozen=True, slots=True)
class LookupdAddress:
    """One nsqlookupd's HTTP API."""

    host: str
    port: int
    https: bool = False

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.address}"


def parse_lookupd_address(raw: object) -> LookupdAddress:
    """``host:port``, ``host`` (port 4161) or ``http(s)://host:port[/...]`` (go-nsq's
    form; any path is ignored, ``/lookup`` is what is asked)."""
    what = "lookupd HTTP address"
    if not isinstance(raw, str):
        raise NSQValueError(f"{what} must be a host:port string, got {type(raw).__name__}")
    text = raw.strip()
    https = False
    lowered = text.lower()
    for scheme in ("http://", "https://"):
        if lowered.startswith(scheme):
            https = scheme == "https://"
            text = text[len(scheme) :].split("/", 1)[0]
            break
    host, port = parse_address(text, DEFAULT_LOOKUPD_HTTP_PORT, what)
    return LookupdAddress(host, port, https)

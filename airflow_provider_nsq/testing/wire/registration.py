"""nsqlookupd's registration protocol (TCP, ``"  V1"``), both roles, without I/O.

nsqd registers its topics and channels with nsqlookupd over this protocol; consumers never
speak it (they use nsqlookupd's HTTP API), so it lives with the embedded daemons: the
embedded broker speaks nsqd's side, the embedded lookupd nsqlookupd's. Layout, from the
recordings of the real daemons (the nsqlookupd facts, docs/nsqlookupd-facts.md,
section 5)::

    nsqd -> nsqlookupd    "  V1"                                  once, first
                          PING\\n
                          IDENTIFY\\n[i32be size][JSON body]       once per connection
                          REGISTER <topic>[ <channel>]\\n
                          UNREGISTER <topic>[ <channel>]\\n
    nsqlookupd -> nsqd    [i32be size][data]                      one reply per command

A reply has **no frame-type field** (unlike nsqd's ``"  V2"`` frames): ``OK``, the
IDENTIFY reply's JSON, or an error text starting with ``E_``. Every error is fatal:
nsqlookupd writes it and closes the connection. A command line is ``strings.TrimSpace``'d
and then split on every single space, so ``"  PING  \\r\\n"`` is a PING and
``"REGISTER  t"`` names the topic ``''``.

- nsqd's role (the embedded broker; ``NSQLookupdServer.announce``):
  :func:`encode_identify`, :func:`encode_register`, :func:`encode_unregister`,
  :data:`PING`, :class:`ReplyReader`, :func:`parse_identify_reply`.
- nsqlookupd's role (the embedded lookupd): :class:`LookupdServerConnection` turns
  received bytes into :class:`Identify`, :class:`Register`, :class:`Unregister`,
  :class:`Ping` and :class:`ProtocolError` events with nsqlookupd 1.3.0's exact error
  texts; :func:`encode_reply` and :func:`encode_identify_reply` write the answers.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_nsq.protocol.constants import DEFAULT_MAX_BODY_SIZE, OK
from airflow_provider_nsq.protocol.errors import (
    NSQFrameTooLargeError,
    NSQProtocolError,
    NSQServerError,
    NSQValueError,
)
from airflow_provider_nsq.protocol.names import is_valid_name

from .go_json import GoJSONError, decode_go_struct, go_json

MAGIC_V1 = b"  V1"
PING = b"PING\n"

#: nsqlookupd reads sizes as Go ``int32`` and writes ``int32(len(data))``.
_SIZE = struct.Struct(">i")
SIZE_LENGTH = _SIZE.size

#: Largest IDENTIFY body the server reads. nsqlookupd 1.3.0 has no bound (it allocates
#: whatever the client declares, and crashes on a negative size:
#: docs/nsqlookupd-facts.md section 9).
MAX_IDENTIFY_BODY_SIZE = DEFAULT_MAX_BODY_SIZE
#: Longest command line the server buffers (nsqlookupd 1.3.0: no bound). Real lines
#: are a command and two names of at most 64 characters.
MAX_LINE_LENGTH = 64 * 1024

#: Go's ``unicode.IsSpace``: what ``strings.TrimSpace`` removes.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


# -- replies (both roles) ---------------------------------------------------------------


def encode_reply(data: bytes) -> bytes:
    """``[i32be size][data]``: any reply, ``OK``, JSON or ``E_...`` text."""
    return _SIZE.pack(len(data)) + data


def is_error_reply(data: bytes) -> bool:
    """nsqlookupd's errors are the replies whose text starts with ``E_``."""
    return data.startswith(b"E_")


class ReplyReader:
    """Splits the bytes read from nsqlookupd into replies (nsqd's role).

    ``max_size`` bounds one reply, as nsqd's ``readResponseBounded`` does with its
    ``--max-body-size``.
    """

    def __init__(self, max_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_reply(self) -> bytes | None:
        """The next complete reply, or ``None`` until more bytes arrive."""
        buf = self._buf
        if len(buf) < SIZE_LENGTH:
            return None
        (size,) = _SIZE.unpack_from(buf)
        if size < 0:
            raise NSQProtocolError(f"invalid nsqlookupd reply size {size}")
        if size > self.max_size:
            raise NSQFrameTooLargeError(
                f"nsqlookupd reply of {size} bytes is over the limit of {self.max_size}"
            )
        end = SIZE_LENGTH + size
        if len(buf) < end:
            return None
        data = bytes(buf[SIZE_LENGTH:end])
        del buf[:end]
        return data


# -- nsqd's role (what nsqd sends) ----------------------------------------------------


def encode_identify(fields: Mapping[str, Any]) -> bytes:
    """``IDENTIFY\\n[size][JSON]``. nsqd marshals a Go map, so the keys come sorted:
    ``broadcast_address``, ``hostname``, ``http_port``, ``tcp_port``, ``version``."""
    body = go_json({key: fields[key] for key in sorted(fields)})
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def _names(command: str, topic: str, channel: str | None) -> bytes:
    if not is_valid_name(topic):
        raise NSQValueError(f"{command}: invalid topic name {topic!r}")
    if channel is None or channel == "":
        return f"{command} {topic}\n".encode()
    if not is_valid_name(channel):
        raise NSQValueError(f"{command}: invalid channel name {channel!r}")
    return f"{command} {topic} {channel}\n".encode()


def encode_register(topic: str, channel: str | None = None) -> bytes:
    """``REGISTER T\\n`` or ``REGISTER T C\\n`` (the latter registers the topic too)."""
    return _names("REGISTER", topic, channel)


def encode_unregister(topic: str, channel: str | None = None) -> bytes:
    """``UNREGISTER T C\\n`` (the channel) or ``UNREGISTER T\\n`` (the topic and, on
    nsqlookupd, this producer's registrations of all its channels)."""
    return _names("UNREGISTER", topic, channel)


@dataclass(frozen=True, slots=True)
class LookupdInfo:
    """What nsqlookupd says about itself in its IDENTIFY reply."""

    broadcast_address: str
    hostname: str
    tcp_port: int
    http_port: int
    version: str


_INFO_FIELDS = {
    "broadcast_address": str,
    "hostname": str,
    "tcp_port": int,
    "http_port": int,
    "version": str,
}


def parse_identify_reply(data: bytes) -> LookupdInfo:
    """The IDENTIFY reply as nsqd reads it.

    :raises NSQServerError: for an ``E_...`` reply (nsqlookupd closes the connection).
    :raises NSQProtocolError: when the reply is not the expected JSON.
    """
    if is_error_reply(data):
        raise NSQServerError.from_payload(data)
    try:
        fields = decode_go_struct(data, _INFO_FIELDS)
    except GoJSONError:
        raise NSQProtocolError(f"nsqlookupd's IDENTIFY reply is not JSON: {data[:80]!r}") from None
    return LookupdInfo(
        broadcast_address=fields.get("broadcast_address", ""),
        hostname=fields.get("hostname", ""),
        tcp_port=fields.get("tcp_port", 0),
        http_port=fields.get("http_port", 0),
        version=fields.get("version", ""),
    )


# -- nsqlookupd's role (what nsqlookupd reads) ----------------------------------------


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """A producer (an nsqd) as its IDENTIFY body describes it."""

    broadcast_address: str
    hostname: str
    tcp_port: int
    http_port: int
    version: str


@dataclass(frozen=True, slots=True)
class Identify:
    """A valid IDENTIFY: register the connection as a producer, then answer with
    :func:`encode_identify_reply`."""

    peer: PeerIdentity


@dataclass(frozen=True, slots=True)
class Register:
    """``REGISTER topic [channel]`` from an identified producer; answer ``OK``."""

    topic: str
    channel: str | None


@dataclass(frozen=True, slots=True)
class Unregister:
    """``UNREGISTER topic [channel]`` from an identified producer; answer ``OK``."""

    topic: str
    channel: str | None


@dataclass(frozen=True, slots=True)
class Ping:
    """``PING``: answer ``OK``; refreshes an identified producer's last update."""


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """A fatal error: send ``encode_reply(payload)``, then close the connection."""

    payload: bytes

    @property
    def code(self) -> str:
        return self.payload.split(b" ", 1)[0].decode("ascii", "replace")


Event = Identify | Register | Unregister | Ping | ProtocolError


class _State(enum.Enum):
    MAGIC = "magic"
    LINE = "line"
    BODY_SIZE = "body size"
    BODY = "body"
    CLOSED = "closed"


_PEER_FIELDS = {
    # decoded, then overwritten by the server (docs/nsqlookupd-facts.md
    # section 5)
    "remote_address": str,
    "hostname": str,
    "broadcast_address": str,
    "tcp_port": int,
    "http_port": int,
    "version": str,
}


def _error(code: bytes, text: bytes = b"") -> ProtocolError:
    return ProtocolError(code + b" " + text if text else code)


def go_trim_space(line: bytes) -> bytes:
    """Go's ``strings.TrimSpace`` on raw bytes (invalid UTF-8 is kept as is)."""
    stripped = line.strip(b"\t\n\v\f\r ")
    if stripped.isascii():
        return stripped
    text = line.decode("utf-8", "surrogateescape").strip(_GO_SPACE)
    return text.encode("utf-8", "surrogateescape")


class LookupdServerConnection:
    """One nsqd's connection, as nsqlookupd 1.3.0 reads it.

    Feed bytes with :meth:`receive_data` (and :meth:`receive_eof` when the peer
    half-closes); take events from :meth:`next_event` until it returns ``None``. After a
    :class:`ProtocolError` the connection is closed: write the error, then close. The
    checks run in nsqlookupd's order (``lookup_protocol_v1.go``): "must IDENTIFY" before
    the parameters, "cannot IDENTIFY again" before the body is read.

    Deliberate differences from nsqlookupd 1.3.0 (docs/testing.md): an IDENTIFY body
    size that is negative or over ``max_body_size`` is the fatal error
    ``E_BAD_BODY IDENTIFY invalid body size N`` (nsqlookupd panics and exits on a negative
    size, and allocates any positive one); a command line over ``max_line_length`` bytes
    is ``E_INVALID command line too long``.
    """

    def __init__(
        self,
        max_body_size: int = MAX_IDENTIFY_BODY_SIZE,
        max_line_length: int = MAX_LINE_LENGTH,
    ) -> None:
        self.max_body_size = max_body_size
        self.max_line_length = max_line_length
        self.identified = False
        self._state = _State.MAGIC
        self._buf = bytearray()
        self._eof = False
        self._body_size = 0

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    def receive_data(self, data: bytes) -> None:
        if self._state is not _State.CLOSED:
            self._buf += data

    def receive_eof(self) -> None:
        """The peer sent FIN: a command cut short ends as nsqlookupd ends it."""
        self._eof = True

    def next_event(self) -> Event | None:
        """The next event, or ``None`` when more bytes are needed (or the connection is
        closed: after an error, or at EOF between commands)."""
        while True:
            state = self._state
            if state is _State.CLOSED:
                return None
            if state is _State.MAGIC:
                event = self._read_magic()
            elif state is _State.LINE:
                event = self._read_line()
            elif state is _State.BODY_SIZE:
                event = self._read_body_size()
            else:
                event = self._read_body()
            if event is not None or self._state is state:
                if isinstance(event, ProtocolError):
                    self._close()
                elif event is None and self._eof:
                    self._close()  # EOF while waiting for more: nothing to answer
                return event

    def _close(self) -> None:
        self._state = _State.CLOSED
        self._buf.clear()

    def _read_magic(self) -> Event | None:
        if len(self._buf) < len(MAGIC_V1):
            return None
        magic = bytes(self._buf[: len(MAGIC_V1)])
        del self._buf[: len(MAGIC_V1)]
        if magic != MAGIC_V1:
            return _error(b"E_BAD_PROTOCOL")
        self._state = _State.LINE
        return None

    def _read_line(self) -> Event | None:
        end = self._buf.find(b"\n")
        if end < 0:
            if len(self._buf) > self.max_line_length:
                return _error(
                    b"E_INVALID", b"command line too long (over %d bytes)" % self.max_line_length
                )
            return None  # at EOF: Go's ReadString fails and the loop ends silently
        line = go_trim_space(bytes(self._buf[:end]))
        del self._buf[: end + 1]
        params = line.split(b" ")
        name = params[0]
        if name == b"PING":
            return Ping()
        if name == b"IDENTIFY":
            if self.identified:
                return _error(b"E_INVALID", b"cannot IDENTIFY again")
            self._state = _State.BODY_SIZE
            return None
        if name in (b"REGISTER", b"UNREGISTER"):
            return self._registration(name, params[1:])
        return _error(b"E_INVALID", b"invalid command " + name)

    def _registration(self, name: bytes, params: list[bytes]) -> Event:
        if not self.identified:
            return _error(b"E_INVALID", b"client must IDENTIFY")
        if not params:
            return _error(b"E_INVALID", name + b" insufficient number of params")
        topic = params[0]
        channel = params[1] if len(params) >= 2 else b""
        if not is_valid_name(topic.decode("latin-1")):
            return _error(b"E_BAD_TOPIC", b"%s topic name '%s' is not valid" % (name, topic))
        if channel and not is_valid_name(channel.decode("latin-1")):
            return _error(b"E_BAD_CHANNEL", b"%s channel name '%s' is not valid" % (name, channel))
        event_type = Register if name == b"REGISTER" else Unregister
        return event_type(topic.decode("ascii"), channel.decode("ascii") or None)

    def _read_body_size(self) -> Event | None:
        if len(self._buf) < SIZE_LENGTH:
            if self._eof:
                return _error(b"E_BAD_BODY", b"IDENTIFY failed to read body size")
            return None
        (size,) = _SIZE.unpack_from(self._buf)
        del self._buf[:SIZE_LENGTH]
        if not 0 <= size <= self.max_body_size:
            return _error(b"E_BAD_BODY", b"IDENTIFY invalid body size %d" % size)
        self._body_size = size
        self._state = _State.BODY
        return None

    def _read_body(self) -> Event | None:
        size = self._body_size
        if len(self._buf) < size:
            if self._eof:
                return _error(b"E_BAD_BODY", b"IDENTIFY failed to read body")
            return None
        body = bytes(self._buf[:size])
        del self._buf[:size]
        self._state = _State.LINE
        try:
            fields = decode_go_struct(body, _PEER_FIELDS)
        except GoJSONError:
            return _error(b"E_BAD_BODY", b"IDENTIFY failed to decode JSON body")
        peer = PeerIdentity(
            broadcast_address=fields.get("broadcast_address", ""),
            hostname=fields.get("hostname", ""),
            tcp_port=fields.get("tcp_port", 0),
            http_port=fields.get("http_port", 0),
            version=fields.get("version", ""),
        )
        if not (peer.broadcast_address and peer.tcp_port and peer.http_port and peer.version):
            return _error(b"E_BAD_BODY", b"IDENTIFY missing fields")
        self.identified = True
        return Identify(peer)


def encode_identify_reply(
    *, broadcast_address: str, hostname: str, tcp_port: int, http_port: int, version: str
) -> bytes:
    """nsqlookupd's answer to IDENTIFY: a Go map marshalled, so the keys are sorted."""
    return encode_reply(
        go_json(
            {
                "broadcast_address": broadcast_address,
                "hostname": hostname,
                "http_port": http_port,
                "tcp_port": tcp_port,
                "version": version,
            }
        )
    )


OK_REPLY = encode_reply(OK)

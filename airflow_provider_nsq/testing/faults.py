"""A fault-injecting TCP proxy for tests: put it between a client and nsqd (or any TCP
server) and cut, stall or drop the traffic at a chosen frame.

::

    from airflow_provider_nsq.testing.faults import FaultProxy, cut, stall

    with FaultProxy(nsqd.tcp_address) as proxy:
        proxy.next_connection(cut("to_client", match=b"OK", where="before", how="rst"))
        conn = NSQConnection(ClientConfig(host=proxy.host, port=proxy.port))
        conn.publish("t", b"x")  # nsqd published it; the client gets a reset instead of OK

The proxy knows NSQ's framing in both directions, so a fault can name a *unit*: on the
way to the server the magic and each command (``PUB``, ``MPUB`` ... with its body), on the
way to the client each frame (``OK``, ``_heartbeat_``, a message ...). Once the IDENTIFY
response turns on TLS or compression the stream is opaque and only byte offsets
(``at_byte``) still match. Units are forwarded whole (store and forward), so "before",
"mid" and "after" a unit are exact:

- ``cut``: close both sides with FIN (``how="fin"``) or a reset (``how="rst"``), before
  the unit, after half of it, or right after it;
- ``stall``: hold that direction's bytes from there on (the peer sees silence; the
  connection stays open) until :meth:`FaultProxy.release`;
- ``drop``: discard that direction's bytes from there on, silently.

:meth:`FaultProxy.down` / :meth:`FaultProxy.up` take the "server" away and bring it back
(connections cut, new ones refused). The proxy counts what it saw: ``connections``,
``active``, ``peak_active`` (live client connections at once) and ``cuts``.

It runs in a background thread with its own event loop and binds 127.0.0.1 by default.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..client.settings.address import DEFAULT_NSQD_TCP_PORT, parse_address
from ..protocol.constants import MAGIC_V2
from ..protocol.frames import frame_length
from .servers.loop_thread import ServiceOnLoop
from .wire.command_reader import command_length

__all__ = [
    "Fault",
    "FaultProxy",
    "cut",
    "drop",
    "random_cuts",
    "stall",
]

Direction = Literal["to_server", "to_client"]
Where = Literal["before", "mid", "after"]
How = Literal["fin", "rst"]
Action = Literal["cut", "stall", "drop"]

_DIRECTIONS: tuple[Direction, ...] = ("to_server", "to_client")
_WHERES: tuple[Where, ...] = ("before", "mid", "after")
_HOWS: tuple[How, ...] = ("fin", "rst")
# Past these sizes the stream is not NSQ as the proxy knows it: forward it as opaque bytes.
_MAX_LINE = 64 * 1024
_MAX_UNIT = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault on one connection; build it with :func:`cut`, :func:`stall`, :func:`drop`.

    :param action: ``"cut"``, ``"stall"`` or ``"drop"``.
    :param direction: ``"to_server"`` (the client's commands) or ``"to_client"`` (frames).
    :param nth: fire on the nth matching unit of that direction (1-based).
    :param match: to the server, a command name (``b"PUB"``; the magic is ``b"  V2"``);
        to the client, a payload prefix (``b"OK"``, ``b"_heartbeat_"``, ``b"E_"``).
        None matches every unit.
    :param where: ``"before"`` the unit, ``"mid"`` (after half of it) or ``"after"`` it.
    :param how: for a cut, ``"fin"`` (orderly close) or ``"rst"`` (connection reset).
    :param at_byte: fire once this many bytes went that way, instead of on a unit (works
        on TLS and compressed streams too).
    """

    action: Action
    direction: Direction = "to_client"
    nth: int = 1
    match: bytes | None = None
    where: Where = "before"
    how: How = "fin"
    at_byte: int | None = None

    def __post_init__(self) -> None:
        if self.action not in ("cut", "stall", "drop"):
            raise ValueError(f"unknown fault action {self.action!r}")
        if self.direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {_DIRECTIONS}, got {self.direction!r}")
        if self.where not in _WHERES:
            raise ValueError(f"where must be one of {_WHERES}, got {self.where!r}")
        if self.how not in _HOWS:
            raise ValueError(f"how must be one of {_HOWS}, got {self.how!r}")
        if self.nth < 1:
            raise ValueError(f"nth is 1-based, got {self.nth!r}")
        if self.at_byte is not None and self.at_byte < 0:
            raise ValueError(f"at_byte must be >= 0, got {self.at_byte!r}")


def cut(
    direction: Direction = "to_client",
    nth: int = 1,
    *,
    match: bytes | None = None,
    where: Where = "before",
    how: How = "fin",
    at_byte: int | None = None,
) -> Fault:
    """Close the connection (both sides) at the nth matching unit. See :class:`Fault`."""
    return Fault("cut", direction, nth, match, where, how, at_byte)


def stall(
    direction: Direction = "to_client",
    nth: int = 1,
    *,
    match: bytes | None = None,
    where: Where = "before",
    at_byte: int | None = None,
) -> Fault:
    """Hold that direction's bytes from the nth matching unit on (until ``release()``)."""
    return Fault("stall", direction, nth, match, where, "fin", at_byte)


def drop(
    direction: Direction = "to_client",
    nth: int = 1,
    *,
    match: bytes | None = None,
    where: Where = "before",
    at_byte: int | None = None,
) -> Fault:
    """Silently discard that direction's bytes from the nth matching unit on."""
    return Fault("drop", direction, nth, match, where, "fin", at_byte)


Policy = Callable[[int], Sequence[Fault]]


def random_cuts(
    seed: int,
    every: tuple[int, int] = (10, 50),
    *,
    directions: Sequence[Direction] = _DIRECTIONS,
    wheres: Sequence[Where] = _WHERES,
    hows: Sequence[How] = _HOWS,
) -> Policy:
    """A policy for :class:`FaultProxy`: each connection is cut once, at a random unit
    between ``every[0]`` and ``every[1]``, in a random direction, place and manner
    (reproducible from ``seed``)."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def policy(index: int) -> Sequence[Fault]:
        with lock:
            return (
                cut(
                    rng.choice(directions),
                    rng.randint(*every),
                    where=rng.choice(wheres),
                    how=rng.choice(hows),
                ),
            )

    return policy


class _Units:
    """Splits one direction's bytes into NSQ units (command or frame), incrementally."""

    def __init__(self, direction: Direction) -> None:
        self.direction = direction
        self.opaque = False
        self._buf = bytearray()
        self._magic_pending = direction == "to_server"

    def feed(self, data: bytes) -> None:
        self._buf += data

    def take_all(self) -> bytes:
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def next_unit(self) -> tuple[bytes, bytes] | None:
        """``(name, unit bytes)`` of the next complete unit, or None (also when opaque)."""
        if self.opaque:
            return None
        length = self._unit_length()
        if length is None or len(self._buf) < length:
            return None
        unit = bytes(self._buf[:length])
        del self._buf[:length]
        return self._name(unit), unit

    def _unit_length(self) -> int | None:
        buf = self._buf
        if self.direction == "to_client":
            length = frame_length(buf)
        elif self._magic_pending:
            if len(buf) < 4:
                return None
            self._magic_pending = False
            return 4
        else:
            length = command_length(buf)
            if length is None and len(buf) > _MAX_LINE and b"\n" not in buf:
                self.opaque = True
        if length is not None and length > _MAX_UNIT:
            self.opaque = True
            return None
        return length

    def _name(self, unit: bytes) -> bytes:
        if self.direction == "to_client":
            return unit[8:]  # the payload: matched by prefix
        if unit == MAGIC_V2 or b"\n" not in unit:
            return unit
        return unit.split(b"\n", 1)[0].split(b" ", 1)[0].rstrip(b"\r")


def _upgrades(frame: bytes) -> bool:
    """Is this frame an IDENTIFY response that turns on TLS or compression?"""
    payload = frame[8:]
    if frame[4:8] != b"\x00\x00\x00\x00" or not payload.startswith(b"{"):
        return False
    try:
        info = json.loads(payload)
    except ValueError:
        return False
    return isinstance(info, dict) and any(info.get(k) for k in ("tls_v1", "snappy", "deflate"))


def _reset(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()  # type: ignore[attr-defined]


class _Side(asyncio.Protocol):
    def __init__(self, link: _Link, direction: Direction) -> None:
        self.link = link
        self.direction = direction  # where the bytes this side receives go
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.link.on_data(self.direction, data)

    def eof_received(self) -> bool:
        self.link.on_eof(self.direction)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.on_eof(self.direction)


class _Link:
    """One proxied connection: the client side, the server side and its faults."""

    def __init__(
        self,
        proxy: FaultProxy,
        index: int,
        faults: Sequence[Fault],
        *,
        fired: list[tuple[int, Fault]],
        forget: Callable[[_Link], None],
    ) -> None:
        self.proxy = proxy
        self.index = index
        self.fired = fired  # the proxy's record of every fault that fired
        self.forget = forget  # tells the proxy this link is gone
        self.client = _Side(self, "to_server")
        self.server = _Side(self, "to_client")
        self.faults = list(faults)
        self.seen: dict[int, int] = {}  # fault index -> matching units so far
        self.units = {d: _Units(d) for d in _DIRECTIONS}
        self.sent = dict.fromkeys(_DIRECTIONS, 0)
        self.mode: dict[str, str] = dict.fromkeys(_DIRECTIONS, "open")
        self.held: dict[str, bytearray] = {d: bytearray() for d in _DIRECTIONS}
        self.early: bytearray = bytearray()  # client bytes before the server side is up
        self.closed = False
        self.live = True  # counted in proxy.active

    # -- plumbing -------------------------------------------------------------------------

    def _out(self, direction: Direction) -> asyncio.Transport | None:
        side = self.server if direction == "to_server" else self.client
        return side.transport

    def _write(self, direction: Direction, data: bytes) -> None:
        if not data or self.closed:
            return
        mode = self.mode[direction]
        if mode == "stall":
            self.held[direction] += data
            return
        if mode == "drop":
            return
        transport = self._out(direction)
        if transport is None:
            self.early += data
            return
        transport.write(data)
        self.sent[direction] += len(data)

    def on_data(self, direction: Direction, data: bytes) -> None:
        if self.closed:
            return
        if direction == "to_server" and self.server.transport is None:
            self.early += data  # handled once the upstream connection is made
            return
        units = self.units[direction]
        if units.opaque:
            self._forward_bytes(direction, data)
            return
        units.feed(data)
        while not self.closed:
            unit = units.next_unit()
            if unit is None:
                break
            name, raw = unit
            if not self._forward_unit(direction, name, raw):
                return
            if direction == "to_client" and _upgrades(raw):
                for d in _DIRECTIONS:
                    self.units[d].opaque = True
                    rest = self.units[d].take_all()
                    if rest:
                        self._forward_bytes(d, rest)
        if units.opaque and not self.closed:
            self._forward_bytes(direction, units.take_all())

    def _forward_unit(self, direction: Direction, name: bytes, raw: bytes) -> bool:
        for i, fault in enumerate(self.faults):
            if fault.direction != direction or fault.at_byte is not None:
                continue
            if fault.match is not None and not name.startswith(fault.match):
                continue
            count = self.seen.get(i, 0) + 1
            self.seen[i] = count
            if count != fault.nth:
                continue
            self.faults[i] = _FIRED
            self.fired.append((self.index, fault))
            if fault.where == "before":
                return self._act(fault, raw)
            head = raw if fault.where == "after" else raw[: len(raw) // 2]
            self._forward_bytes(direction, head)
            return self._act(fault, raw[len(head) :])
        self._forward_bytes(direction, raw)
        return not self.closed

    def _forward_bytes(self, direction: Direction, data: bytes) -> None:
        for i, fault in enumerate(self.faults):
            if fault.direction != direction or fault.at_byte is None or self.closed:
                continue
            room = fault.at_byte - self.sent[direction]
            if room > len(data):
                continue
            self.faults[i] = _FIRED
            self.fired.append((self.index, fault))
            head, data = data[: max(room, 0)], data[max(room, 0) :]
            self._write(direction, head)
            self._act(fault, data)
            return
        self._write(direction, data)

    def _act(self, fault: Fault, rest: bytes) -> bool:
        """Apply a fault; ``rest`` is the part of the unit not forwarded. False if the
        link is gone."""
        if fault.action == "cut":
            self.proxy.cuts += 1
            self.close(fault.how)
            return False
        self.mode[fault.direction] = fault.action
        self._write(fault.direction, rest)
        return True

    # -- lifecycle ------------------------------------------------------------------------

    def server_connected(self) -> None:
        early, self.early = bytes(self.early), bytearray()
        if early:
            self.on_data("to_server", early)

    def on_eof(self, direction: Direction) -> None:
        if self.closed:
            return
        if direction == "to_client" and self.mode["to_client"] != "open":
            # The server went away behind a stalled or dropped path: the client sees
            # silence, as it would behind a broken link.
            if self.server.transport is not None:
                self.server.transport.close()
            return
        self.close("fin")

    def release(self) -> None:
        for direction in _DIRECTIONS:
            if self.mode[direction] == "stall":
                self.mode[direction] = "open"
                held, self.held[direction] = bytes(self.held[direction]), bytearray()
                self._write(direction, held)

    def client_gone(self) -> bool:
        """Has the client closed its end (EOF or reset waiting to be read)?"""
        transport = self.client.transport
        sock = transport.get_extra_info("socket") if transport else None
        if sock is None:
            return False  # accepted in this loop iteration: not even started
        try:
            # asyncio's socket wrapper has no recv(): peek through a duplicate descriptor.
            with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
                return dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self, how: How = "fin") -> None:
        if self.closed:
            return
        self.closed = True
        self.forget(self)
        for side in (self.client, self.server):
            if side.transport is None:
                continue
            if how == "rst":
                _reset(side.transport)
            else:
                side.transport.close()


_FIRED = Fault("cut", nth=1 << 62)  # a fired fault's slot: never matches again


class FaultProxy(ServiceOnLoop["FaultProxy"]):
    """A TCP proxy on 127.0.0.1 that injects faults; see the module docstring.

    :param upstream: the server, ``"host:port"`` or ``(host, port)``.
    :param policy: ``policy(index) -> faults`` for each new connection (0-based index)
        that :meth:`next_connection` did not plan; e.g. :func:`random_cuts`.
    :param host: the address to listen on.
    :param port: the port to listen on (0: a free one).
    """

    thread_name = "nsq-fault-proxy"

    def __init__(
        self,
        upstream: str | tuple[str, int],
        *,
        policy: Policy | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if isinstance(upstream, str):
            upstream = parse_address(upstream, DEFAULT_NSQD_TCP_PORT, "upstream")
        self.upstream = upstream
        self.policy = policy
        self.host = host
        self.port = port
        self.connections = 0  # accepted in all
        self.active = 0  # client connections open now
        self.peak_active = 0
        self.cuts = 0  # cuts made by faults, cut_all() and down()
        self._fired: list[tuple[int, Fault]] = []
        self._plans: deque[Sequence[Fault]] = deque()
        self._links: set[_Link] = set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        super().__init__()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def fired(self) -> list[tuple[int, Fault]]:
        """``(connection index, fault)`` for every fault that fired, in order."""
        return list(self._fired)

    def __repr__(self) -> str:
        up = f"{self.upstream[0]}:{self.upstream[1]}"
        return f"FaultProxy({self.address} -> {up}, connections={self.connections})"

    # -- lifecycle --------------------------------------------------------------------------

    async def _open(self) -> FaultProxy:
        await self._listen()
        return self

    async def _close(self, service: FaultProxy) -> None:
        await self._unlisten()
        for task in list(self._tasks):
            task.cancel()
        for link in list(self._links):
            link.close("fin")
        for _ in range(3):  # let the transports run connection_lost and close sockets
            await asyncio.sleep(0)

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._accept, self.host, self.port, backlog=1024, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _unlisten(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()

    # -- connections ------------------------------------------------------------------------

    def _accept(self) -> _Side:
        index = self.connections
        self.connections += 1
        faults = self._plans.popleft() if self._plans else ()
        if not faults and self.policy is not None:
            faults = self.policy(index)
        # A client that closed a connection right before opening this one must not count
        # twice: its EOF may still be waiting in the loop.
        for other in list(self._links):
            if other.client_gone():
                other.close("fin")
        link = _Link(self, index, faults, fired=self._fired, forget=self._forget)
        self._links.add(link)
        self.active += 1
        self.peak_active = max(self.peak_active, self.active)
        task = asyncio.get_running_loop().create_task(self._connect_upstream(link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return link.client

    async def _connect_upstream(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: link.server, *self.upstream)
        except OSError:
            # What a client sees of a server that is down: a reset.
            link.close("rst")
            return
        if link.closed:
            if link.server.transport is not None:
                link.server.transport.close()
            return
        link.server_connected()

    def _forget(self, link: _Link) -> None:
        if link.live:
            link.live = False
            self.active -= 1
        self._links.discard(link)

    # -- control (thread-safe) -------------------------------------------------------------

    def _call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        async def run(_: FaultProxy) -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return self._runner.run(run, timeout)

    def next_connection(self, *faults: Fault) -> None:
        """Plan ``faults`` for the next connection accepted (calls queue up: one plan per
        connection). Without faults, the next connection runs clean."""
        self._call(lambda: self._plans.append(tuple(faults)))

    def inject(self, *faults: Fault) -> None:
        """Add ``faults`` to every open connection; units are counted from now on."""

        def add() -> None:
            for link in self._links:
                link.faults.extend(
                    f if f.at_byte is None else _shift(f, link.sent[f.direction]) for f in faults
                )

        self._call(add)

    def cut_all(self, how: How = "fin") -> int:
        """Cut every open connection now; returns how many."""

        def cut_now() -> int:
            links = list(self._links)
            for link in links:
                self.cuts += 1
                link.close(how)
            return len(links)

        result: int = self._call(cut_now)
        return result

    def release(self) -> None:
        """Forward what stalled connections held, and stop stalling them."""

        def release_all() -> None:
            for link in self._links:
                link.release()

        self._call(release_all)

    def down(self, how: How = "rst") -> None:
        """The server goes away: open connections are cut and new ones refused."""

        async def go_down() -> None:
            await self._unlisten()
            for link in list(self._links):
                self.cuts += 1
                link.close(how)

        self._call(go_down)

    def up(self) -> None:
        """Accept connections again, on the same port."""
        self._call(self._listen)


def _shift(fault: Fault, by: int) -> Fault:
    assert fault.at_byte is not None
    return Fault(
        fault.action, fault.direction, fault.nth, fault.match, fault.where, fault.how,
        fault.at_byte + by,
    )  # fmt: skip

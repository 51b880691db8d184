"""The broker's registration with nsqlookupds, as nsqd 1.3.0 does it (``nsqd/lookup.go``).

For each ``--lookupd-tcp-address`` one :class:`LookupdPeer` keeps a ``"  V1"``
connection (docs/nsqlookupd-facts.md section 6):

- on connect: ``"  V1"``, ``IDENTIFY`` with ``broadcast_address``, ``hostname``,
  ``http_port``, ``tcp_port`` and ``version`` (keys sorted, as a Go map), then one
  ``REGISTER T C`` per channel, or ``REGISTER T`` for a topic without channels;
- topic created: ``REGISTER T``; channel created: ``REGISTER T C``; channel deleted:
  ``UNREGISTER T C``; topic deleted: ``UNREGISTER T`` then ``UNREGISTER T C`` for each
  of its channels (``#ephemeral`` ones alike, when they go with their last consumer);
- every 15 s ``PING``; one command at a time, each answered before the next;
- shutdown: nothing is sent, the connection is just closed;
- when a topic is created, the channels every lookupd knows for it (``GET /channels``
  on the ``broadcast_address:http_port`` from its IDENTIFY reply) are created first,
  except ``#ephemeral`` ones, so they get the topic's first messages too.

Deliberate differences (docs/testing.md): a lost connection is noticed at once and
re-established at once, with everything registered again (nsqd notices only at its next
write, loses the commands written into the dead socket and reconnects on its next 15 s
tick); a lookupd that cannot be reached is retried with a backoff of at most 1 s; the
topic's first publishes return before the channels are pre-created (they wait in the
topic and reach every pre-created channel, as in nsqd).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import urllib.parse
from collections import deque

from airflow_provider_nsq.client.settings.address import (
    DEFAULT_LOOKUPD_TCP_PORT,
    format_address,
    parse_address,
)
from airflow_provider_nsq.client.transport.http_request import NSQ_V1_ACCEPT, ahttp_request
from airflow_provider_nsq.protocol.errors import NSQProtocolError, NSQServerError
from airflow_provider_nsq.protocol.names import is_ephemeral

from ..wire.registration import (
    MAGIC_V1,
    PING,
    LookupdInfo,
    ReplyReader,
    encode_identify,
    encode_register,
    encode_unregister,
    is_error_reply,
    parse_identify_reply,
)
from .channel import Channel
from .state import BrokerState
from .topic import Topic

log = logging.getLogger("airflow_provider_nsq.testing.broker")

#: nsqd's timeout for dialling a lookupd (``lookup_peer.go``: 1 s; more under test load).
CONNECT_TIMEOUT_S = 2.0
#: How long one reply may take before the connection counts as dead (nsqd: 1 s).
REPLY_TIMEOUT_S = 5.0
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0


class _ConnectionLost(Exception):
    pass


class _PeerProtocol(asyncio.Protocol):
    """One V1 connection: commands out, replies matched to them in order."""

    def __init__(self, max_reply_size: int, wakeup: asyncio.Event) -> None:
        self.wakeup = wakeup
        self.reader = ReplyReader(max_reply_size)
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[bytes]] = deque()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        try:
            while (reply := self.reader.next_reply()) is not None:
                if not self.pending:
                    raise NSQProtocolError(f"nsqlookupd sent an unrequested reply {reply!r}")
                future = self.pending.popleft()
                if not future.done():
                    future.set_result(reply)
        except NSQProtocolError as exc:
            log.error("LOOKUPD: %s; closing", exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.wakeup.set()
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(_ConnectionLost("connection closed"))

    async def command(self, data: bytes) -> bytes:
        if self.transport is None or self.lost.done():
            raise _ConnectionLost("not connected")
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        self.transport.write(data)
        try:
            async with asyncio.timeout(REPLY_TIMEOUT_S):
                return await future
        except TimeoutError:
            self.close()
            raise _ConnectionLost(f"no reply within {REPLY_TIMEOUT_S:g}s") from None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class LookupdPeer:
    """The broker's connection to one nsqlookupd, kept up for the broker's lifetime."""

    def __init__(self, registration: LookupdRegistration, address: str) -> None:
        self.registration = registration
        self.address = address
        self.host, self.port = parse_address(
            address, DEFAULT_LOOKUPD_TCP_PORT, "lookupd_tcp_addresses"
        )
        #: nsqlookupd's IDENTIFY reply, kept after a disconnect (as nsqd keeps it).
        self.info: LookupdInfo | None = None
        self.connected = False
        self.first_attempt = asyncio.Event()  # set once registered, or failed to be
        self._queue: deque[bytes] = deque()
        self._wakeup = asyncio.Event()
        self._protocol: _PeerProtocol | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def __repr__(self) -> str:
        return f"LookupdPeer({self.address})"

    @property
    def http_address(self) -> tuple[str, int] | None:
        """Where nsqd asks this lookupd for channels: its broadcast address and HTTP port."""
        if self.info is None or not self.info.broadcast_address:
            return None
        return self.info.broadcast_address, self.info.http_port

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"lookupd-peer-{self.address}"
        )

    async def stop(self) -> None:
        # A flag as well as the cancel: a cancellation that arrives as an awaited connect
        # completes can be lost in code this loop does not own.
        self._stopping = True
        if self._protocol is not None:
            self._protocol.close()  # nsqd sends no UNREGISTER when it exits
        if self._task is not None:
            self._task.cancel()
            # asyncio.wait: bounded, and a cancellation of stop() itself is not swallowed.
            await asyncio.wait({self._task}, timeout=CONNECT_TIMEOUT_S + REPLY_TIMEOUT_S)
            if self._task.done() and not self._task.cancelled():
                self._task.result()

    def send(self, command: bytes) -> None:
        """Queue a command. While disconnected it is dropped: the next connection
        registers the broker's state as it is then."""
        if self.connected:
            self._queue.append(command)
            self._wakeup.set()

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                await self._connect()
            except Exception as exc:  # refused, timed out, refused IDENTIFY: retry
                self._drop_connection()
                level = logging.WARNING if failures == 0 else logging.DEBUG
                log.log(level, "LOOKUPD(%s): cannot register: %s", self.address, exc)
                self.first_attempt.set()
                await asyncio.sleep(min(RETRY_MIN_S * 2**failures, RETRY_MAX_S))
                failures += 1
                continue
            failures = 0
            try:
                await self._serve()
            except Exception as exc:
                # Deviation from nsqd: notice at once, reconnect at once, register all.
                log.warning("LOOKUPD(%s): connection lost (%s); reconnecting", self.address, exc)
            finally:
                self._drop_connection()

    def _drop_connection(self) -> None:
        self.connected = False
        self._queue.clear()
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        max_reply = self.registration.broker.options.max_body_size
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _, protocol = await loop.create_connection(
                lambda: _PeerProtocol(max_reply, self._wakeup), self.host, self.port
            )
        self._protocol = protocol
        assert protocol.transport is not None
        protocol.transport.write(MAGIC_V1)
        reply = await protocol.command(encode_identify(self.registration.identity()))
        self.info = parse_identify_reply(reply)
        log.info("LOOKUPD(%s): peer info %s", self.address, self.info)
        # Everything that happened until now is in this snapshot; later events queue.
        self._queue = deque(self.registration.snapshot())
        self.connected = True

    async def _serve(self) -> None:
        protocol = self._protocol
        assert protocol is not None
        loop = asyncio.get_running_loop()
        interval = self.registration.ping_interval_s
        next_ping = loop.time() + interval
        while not self._stopping:
            while self._queue:
                await self._round_trip(protocol, self._queue.popleft())
            self.first_attempt.set()
            wait = next_ping - loop.time()
            if wait <= 0:
                await self._round_trip(protocol, PING)
                next_ping = loop.time() + interval
                continue
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()  # a command, or the close
            if protocol.lost.done():
                raise _ConnectionLost("closed by nsqlookupd")

    async def _round_trip(self, protocol: _PeerProtocol, command: bytes) -> None:
        log.debug("LOOKUPD(%s): %r", self.address, command)
        reply = await protocol.command(command)
        if is_error_reply(reply):  # nsqlookupd closes after any error
            raise NSQServerError.from_payload(reply)


class LookupdRegistration:
    """Registers one broker's topics and channels with every configured nsqlookupd.

    The broker calls :meth:`topic_created`, :meth:`topic_deleted`,
    :meth:`channel_created` and :meth:`channel_deleted` from its loop; nothing else in
    the broker knows about lookupds.
    """

    def __init__(self, broker: BrokerState) -> None:
        self.broker = broker
        options = broker.options
        self.ping_interval_s = options.lookupd_ping_interval / 1000.0
        self.hostname = socket.gethostname()
        self.peers = [LookupdPeer(self, a) for a in options.lookupd_tcp_addresses]
        self._tasks: set[asyncio.Task[None]] = set()
        # Topics whose channels are being pre-created -> (the topic, the channels created
        # or deleted meanwhile: pre-creation must not bring back one deleted since).
        self._precreating: dict[str, tuple[Topic, set[str]]] = {}

    async def start(self) -> None:
        """Connect to every lookupd; returns once each has the broker registered, or
        could not be reached (it is retried in the background)."""
        for peer in self.peers:
            peer.start()
        await asyncio.gather(*(peer.first_attempt.wait() for peer in self.peers))

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        # Wait for the cancellations to land: a loop closed with a pre-creation still
        # asking a lookupd leaves its coroutines to be closed by the garbage collector.
        await asyncio.gather(*tasks, return_exceptions=True)
        for peer in self.peers:
            await peer.stop()

    # -- what nsqd tells a lookupd --------------------------------------------------

    def identity(self) -> dict[str, object]:
        broker, options = self.broker, self.broker.options
        return {
            "broadcast_address": options.broadcast_address,
            "hostname": self.hostname,
            "http_port": options.broadcast_http_port or broker.http_port,
            "tcp_port": options.broadcast_tcp_port or broker.tcp_port,
            "version": broker.version,
        }

    def snapshot(self) -> list[bytes]:
        """``REGISTER T C`` per channel, ``REGISTER T`` per topic without channels."""
        commands = []
        for name, topic in self.broker.topics.items():
            if topic.channels:
                commands += [encode_register(name, c) for c in topic.channels]
            else:
                commands.append(encode_register(name))
        return commands

    def _send(self, command: bytes) -> None:
        for peer in self.peers:
            peer.send(command)

    # -- hooks the broker calls ------------------------------------------------------

    def topic_created(self, topic: Topic) -> None:
        self._send(encode_register(topic.name))
        addresses = [a for p in self.peers if (a := p.http_address) is not None]
        if addresses:
            topic.hold()
            self._precreating[topic.name] = (topic, set())
            task = asyncio.get_running_loop().create_task(self._precreate(topic, addresses))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def topic_deleted(self, topic: Topic) -> None:
        self._send(encode_unregister(topic.name))
        for name in topic.channels:
            self._send(encode_unregister(topic.name, name))

    def channel_created(self, channel: Channel) -> None:
        self._touched(channel)
        self._send(encode_register(channel.topic_name, channel.name))

    def channel_deleted(self, channel: Channel) -> None:
        self._touched(channel)
        self._send(encode_unregister(channel.topic_name, channel.name))

    def _touched(self, channel: Channel) -> None:
        pending = self._precreating.get(channel.topic_name)
        if pending is not None:
            pending[1].add(channel.name)

    # -- channel pre-creation ---------------------------------------------------------

    async def _precreate(self, topic: Topic, addresses: list[tuple[str, int]]) -> None:
        # nsqd does this before the publish that created the topic returns; here the
        # publish has returned, so channels may have come and gone meanwhile: leave them.
        touched = self._precreating[topic.name][1]
        try:
            names = await self._lookupd_channels(topic.name, addresses)
            if self.broker.topics.get(topic.name) is topic:
                for name in names:
                    # nsqd creates no #ephemeral channel without a consumer.
                    if not is_ephemeral(name) and name not in touched:
                        topic.get_channel(name)
        finally:
            if self._precreating.get(topic.name, (None,))[0] is topic:
                del self._precreating[topic.name]
            topic.release()

    async def _lookupd_channels(self, topic: str, addresses: list[tuple[str, int]]) -> list[str]:
        options = self.broker.options
        timeout = (options.http_client_connect_timeout + options.http_client_request_timeout) / 1000
        target = "/channels?topic=" + urllib.parse.quote_plus(topic)

        async def ask(host: str, port: int) -> list[str]:
            response = await ahttp_request(
                host, port, target, timeout=timeout, headers=[("Accept", NSQ_V1_ACCEPT)]
            )
            if response.status != 200:
                raise NSQProtocolError(f"{response.url} answered {response.status}")
            doc = response.json()
            return [c for c in doc.get("channels") or [] if isinstance(c, str)]

        results = await asyncio.gather(*(ask(h, p) for h, p in addresses), return_exceptions=True)
        names: set[str] = set()
        for (host, port), result in zip(addresses, results, strict=True):
            if isinstance(result, BaseException):
                log.warning(
                    "failed to query nsqlookupd %s for channels to pre-create for topic %s - %s",
                    format_address(host, port),
                    topic,
                    result,
                )
            else:
                names.update(result)
        return sorted(names)

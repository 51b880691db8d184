"""One nsqd's ``"  V1"`` TCP connection: events from the protocol core, applied to the DB.

``nsqlookupd/lookup_protocol_v1.go`` 1.3.0: one reply per command, in order; every
error is written and the connection closed; when the connection ends, for any reason,
the producer is removed from every key at once (the keys stay). nsqlookupd sends nothing
unprompted and sets no read timeout (docs/nsqlookupd-facts.md section 5).
"""

from __future__ import annotations

import asyncio
import logging

from airflow_provider_nsq.client.settings.address import format_address
from airflow_provider_nsq.protocol.names import is_ephemeral

from ..wire.registration import (
    OK_REPLY,
    Event,
    Identify,
    LookupdServerConnection,
    Ping,
    ProtocolError,
    Register,
    Unregister,
    encode_identify_reply,
    encode_reply,
)
from .options import NSQLOOKUPD_VERSION
from .registry import CLIENT, PeerInfo, Registration
from .state import LookupdState

log = logging.getLogger("airflow_provider_nsq.testing.lookupd")


class PeerConnection(asyncio.Protocol):
    """The server side of one registration connection."""

    def __init__(self, lookupd: LookupdState) -> None:
        self.lookupd = lookupd
        self.core = LookupdServerConnection()
        self.transport: asyncio.Transport | None = None
        self.address = "?"
        self.peer: PeerInfo | None = None

    def __repr__(self) -> str:
        return f"PeerConnection({self.address})"

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        if peername:
            self.address = format_address(peername[0], peername[1])
        self.lookupd.connections.add(self)
        log.debug("TCP: new client(%s)", self.address)

    def data_received(self, data: bytes) -> None:
        self.core.receive_data(data)
        self._pump()

    def eof_received(self) -> bool:
        self.core.receive_eof()
        self._pump()
        return False  # close: nsqlookupd's read loop ends at EOF

    def connection_lost(self, exc: Exception | None) -> None:
        self.lookupd.connections.discard(self)
        peer = self.peer
        if peer is None:
            return
        for key in self.lookupd.db.lookup_registrations(peer.id):
            self._remove(key)
        self.peer = None

    def abort(self) -> None:
        """Drop the connection at once (the lookupd is stopping)."""
        if self.transport is not None:
            self.transport.abort()

    # -- events -------------------------------------------------------------------------

    def _pump(self) -> None:
        while self.transport is not None and not self.transport.is_closing():
            event = self.core.next_event()
            if event is None:
                if self.core.closed:
                    self.transport.close()
                return
            self._handle(event)

    def _write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def _handle(self, event: Event) -> None:
        if isinstance(event, ProtocolError):
            log.error("[%s] - %s", self.address, event.payload.decode("utf-8", "replace"))
            self._write(encode_reply(event.payload))
            assert self.transport is not None
            self.transport.close()
        elif isinstance(event, Ping):
            if self.peer is not None:
                self.peer.touch()
            self._write(OK_REPLY)
        elif isinstance(event, Identify):
            self._identify(event)
        elif isinstance(event, Register):
            self._register(event.topic, event.channel)
            self._write(OK_REPLY)
        elif isinstance(event, Unregister):
            self._unregister(event.topic, event.channel)
            self._write(OK_REPLY)

    def _identify(self, event: Identify) -> None:
        peer = event.peer
        self.peer = PeerInfo(
            id=self.address,
            remote_address=self.address,
            hostname=peer.hostname,
            broadcast_address=peer.broadcast_address,
            tcp_port=peer.tcp_port,
            http_port=peer.http_port,
            version=peer.version,
        )
        log.info(
            "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
            self.address,
            peer.broadcast_address,
            peer.tcp_port,
            peer.http_port,
            peer.version,
        )
        self._add(CLIENT)
        lookupd = self.lookupd
        self._write(
            encode_identify_reply(
                broadcast_address=lookupd.options.broadcast_address,
                hostname=lookupd.options.hostname,
                tcp_port=lookupd.tcp_port,
                http_port=lookupd.http_port,
                version=NSQLOOKUPD_VERSION,
            )
        )

    def _add(self, key: Registration) -> None:
        assert self.peer is not None
        if self.lookupd.db.add_producer(key, self.peer):
            log.info(
                "DB: client(%s) REGISTER category:%s key:%s subkey:%s",
                self.address,
                key.category,
                key.key,
                key.subkey,
            )

    def _remove(self, key: Registration) -> tuple[bool, int]:
        assert self.peer is not None
        removed, left = self.lookupd.db.remove_producer(key, self.peer.id)
        if removed:
            log.info(
                "DB: client(%s) UNREGISTER category:%s key:%s subkey:%s",
                self.address,
                key.category,
                key.key,
                key.subkey,
            )
        return removed, left

    def _register(self, topic: str, channel: str | None) -> None:
        # REGISTER T C registers the topic too
        # (docs/nsqlookupd-facts.md section 5); it does not count as
        # activity for --inactive-producer-timeout.
        if channel is not None:
            self._add(Registration("channel", topic, channel))
        self._add(Registration("topic", topic, ""))

    def _unregister(self, topic: str, channel: str | None) -> None:
        db = self.lookupd.db
        if channel is not None:
            key = Registration("channel", topic, channel)
            _, left = self._remove(key)
            # An #ephemeral key goes with its last producer, but only on UNREGISTER.
            if left == 0 and is_ephemeral(channel):
                db.remove_registration(key)
            return
        # A topic UNREGISTER also takes this producer off every channel of the topic.
        assert self.peer is not None
        for key in db.find_registrations("channel", topic, "*"):
            removed, _ = db.remove_producer(key, self.peer.id)
            if removed:  # nsqd's usual order; nsqlookupd logs it as a WARNING
                log.info(
                    "client(%s) unexpected UNREGISTER category:channel key:%s subkey:%s",
                    self.address,
                    topic,
                    key.subkey,
                )
        key = Registration("topic", topic, "")
        _, left = self._remove(key)
        if left == 0 and is_ephemeral(topic):
            db.remove_registration(key)

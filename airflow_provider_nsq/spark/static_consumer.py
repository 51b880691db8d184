"""A long-lived consumer of one topic/channel on a fixed list of nsqd (blocking, one thread).

This is the stream reader's seam over the single-connection blocking client, shaped like
the multi-nsqd consumer core (``client/consumer.py``: ``start(max_in_flight)``,
``read(timeout)``, ``finish``/``requeue``/``touch``, ``close``), so the reader switches to
that core with a small change once it exists. It adds one thing the reader needs: several
connections to the same nsqd, because nsqd caps each connection's RDY at
``--max-rdy-count`` (2500) and a message held until Spark commits its batch keeps its
slot in the RDY window (FACTS.md section 6: "RDY is a window, not a credit").

Not thread-safe: one thread calls everything (the reader's pump thread).
"""

from __future__ import annotations

import math
import select
import ssl
from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter

from ..client.blocking import NSQConnection
from ..client.config import ClientConfig
from ..client.message import NSQMessage
from ..protocol.errors import NSQConnectionClosedError, NSQError


def message_nsqd(message: NSQMessage) -> str:
    """``host:port`` of the nsqd that delivered ``message``."""
    return str(message._conn.config.address)


class StaticNSQDConsumer:
    """Consume ``topic``/``channel`` from every nsqd in ``configs`` with one RDY budget.

    :param configs: one ClientConfig per nsqd (TCP address, TLS, AUTH ...).
    :param topic: the topic.
    :param channel: the channel (created by SUB if missing).
    """

    def __init__(self, configs: Sequence[ClientConfig], topic: str, channel: str) -> None:
        if not configs:
            raise ValueError("StaticNSQDConsumer needs at least one nsqd")
        self.configs = list(configs)
        self.topic = topic
        self.channel = channel
        self.connections: list[NSQConnection] = []
        self.max_in_flight = 0
        self.msg_timeout_ms = 60_000  # nsqd's default, until IDENTIFY says otherwise
        self.max_msg_timeout_ms = 900_000

    # -- lifecycle -------------------------------------------------------------------

    def start(self, max_in_flight: int) -> None:
        """Connect to every nsqd, SUB, and open delivery for ``max_in_flight`` messages."""
        try:
            self.connections = [self._open(config) for config in self.configs]
            info = self.connections[0].server_info
            self.msg_timeout_ms = int(info.get("msg_timeout") or self.msg_timeout_ms)
            self.max_msg_timeout_ms = int(info.get("max_msg_timeout") or self.max_msg_timeout_ms)
            self.change_max_in_flight(max_in_flight)
        except BaseException:
            self.close()
            raise

    def _open(self, config: ClientConfig) -> NSQConnection:
        conn = NSQConnection(config).connect()
        try:
            conn.subscribe(self.topic, self.channel)
        except BaseException:
            conn.close()
            raise
        return conn

    def change_max_in_flight(self, max_in_flight: int) -> None:
        """Send RDY so that at most ``max_in_flight`` messages are in flight in total
        (0 pauses delivery), opening more connections to each nsqd when its max RDY
        count requires. The remainder of an uneven split is spread, not dropped."""
        per_nsqd = math.ceil(max_in_flight / len(self.configs))
        for config in self.configs:
            mine = [c for c in self.connections if c.config is config]
            needed = math.ceil(per_nsqd / max(mine[0].max_rdy_count, 1)) - len(mine)
            self.connections += [self._open(config) for _ in range(needed)]
        self.max_in_flight = max_in_flight
        n = len(self.connections)
        share, extra = divmod(max_in_flight, n)
        for i, conn in enumerate(self.connections):
            conn.ready(min(share + (1 if i < extra else 0), conn.max_rdy_count))

    def close(self, requeue: Sequence[NSQMessage] = ()) -> None:
        """Stop delivery (CLS), REQ ``requeue`` and whatever arrived meanwhile, and close.

        REQ before CLS would be useless: with RDY still open, nsqd hands the requeued
        messages straight back to this connection, where they wait out msg_timeout once
        it closes (nsqd does not requeue on disconnect, FACTS.md section 6).
        """
        connections, self.connections = self.connections, []
        for conn in connections:
            if conn.connected:
                try:
                    conn.start_close()  # nsqd answers CLOSE_WAIT after its last message
                except NSQError:
                    pass  # closing anyway; its messages come back after msg_timeout
        try:
            for conn, group in _by_connection(requeue):
                conn.requeue(*group)
        finally:
            for conn in connections:
                conn.close()  # REQs what arrived before CLOSE_WAIT and was never handed out

    # -- reading ---------------------------------------------------------------------

    def read(self, timeout: float) -> list[NSQMessage]:
        """Wait up to ``timeout`` seconds for any connection to have data; return the
        messages that arrived (possibly none). Heartbeats are answered while reading.

        Raises :class:`NSQConnectionClosedError` if nsqd closed a connection: its
        unanswered messages go back to the channel after their msg_timeout.
        """
        connections = self.connections
        if not connections:
            raise NSQConnectionClosedError("the consumer is closed")
        # TLS may hold decrypted bytes the socket no longer shows as readable.
        ready = [c for c in connections if isinstance(c._sock, ssl.SSLSocket) and c._sock.pending()]
        if not ready:
            socks = {c._sock: c for c in connections if c._sock is not None}
            readable, _, _ = select.select(list(socks), [], [], max(timeout, 0.0))
            ready = [socks[s] for s in readable]
        messages: list[NSQMessage] = []
        for conn in ready:
            got = conn.read_messages(0)
            if got:
                messages += got
            elif not conn.connected:
                raise NSQConnectionClosedError(
                    f"nsqd at {conn.config.address} closed the connection; its unanswered "
                    "messages are redelivered after their msg_timeout"
                )
        return messages

    # -- answering -------------------------------------------------------------------

    def finish(self, messages: Sequence[NSQMessage]) -> None:
        """FIN ``messages``, each on the connection that delivered it."""
        for conn, group in _by_connection(messages):
            conn.finish(*group)

    def requeue(self, messages: Sequence[NSQMessage], delay_ms: int = 0) -> None:
        """REQ ``messages`` (redelivered with attempts + 1)."""
        for conn, group in _by_connection(messages):
            conn.requeue(*group, delay_ms=delay_ms)

    def touch(self, messages: Sequence[NSQMessage]) -> None:
        """TOUCH ``messages``: restart their msg_timeout (up to nsqd's max-msg-timeout
        since delivery)."""
        for conn, group in _by_connection(messages):
            conn.touch(*group)


def _by_connection(
    messages: Sequence[NSQMessage],
) -> list[tuple[NSQConnection, list[NSQMessage]]]:
    """Group ``messages`` by the connection that delivered them (closed ones skipped:
    nsqd redelivers their messages anyway)."""
    groups: dict[int, tuple[NSQConnection, list[NSQMessage]]] = {}
    # Messages come in runs from one connection: group the runs, not each message.
    for conn, run in groupby(messages, key=_CONN):
        entry = groups.get(id(conn))
        if entry is None:
            groups[id(conn)] = entry = (conn, [])
        entry[1].extend(run)
    return [(conn, group) for conn, group in groups.values() if conn.connected]


_CONN = attrgetter("_conn")

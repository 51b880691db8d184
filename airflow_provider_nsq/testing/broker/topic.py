"""A topic: fans each published message out to every channel.

docs/nsqd-facts.md section 5: a topic with no channel keeps its messages
until the first channel appears (that channel gets them all); an ``#ephemeral`` topic goes
with its last channel.
"""

from __future__ import annotations

import asyncio
from collections import deque
from itertools import repeat
from typing import Any, Protocol

from .channel import Channel, QueueFull
from .message import BrokerMessage, IdGenerator, Item, now_ns
from .options import BrokerOptions


class TopicListener(Protocol):
    """What the broker is told about a topic's channels (for nsqlookupd registration)."""

    def channel_created(self, channel: Channel) -> None: ...

    def channel_deleted(self, channel: Channel) -> None: ...

    def last_channel_gone(self, topic: Topic) -> None:
        """An ``#ephemeral`` topic lost its last channel: the broker deletes it."""


class Topic:
    def __init__(
        self,
        name: str,
        options: BrokerOptions,
        loop: asyncio.AbstractEventLoop,
        ids: IdGenerator,
        listener: TopicListener,
    ) -> None:
        self.name = name
        self.options = options
        self.ephemeral = name.endswith("#ephemeral")
        self.loop = loop
        self.ids = ids
        self.listener = listener
        self.channels: dict[str, Channel] = {}
        self.pending: deque[Item] = deque()  # only while there is no channel
        self.paused = False
        self.held = False  # pre-creating channels known to lookupds (see hold())
        self.deleted = False
        self.message_count = 0
        self.message_bytes = 0

    def get_channel(self, name: str) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            channel = self.channels[name] = Channel(
                self.name, name, self.options, self.loop, lambda: self.delete_channel(name)
            )
            if len(self.channels) == 1 and self.pending and not self.paused and not self.held:
                pending, self.pending = list(self.pending), deque()
                channel.put_many(pending, self.loop.time())
            self.listener.channel_created(channel)
        return channel

    def delete_channel(self, name: str) -> bool:
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        self.listener.channel_deleted(channel)
        channel.close()
        if self.ephemeral and not self.channels and not self.deleted:
            self.listener.last_channel_gone(self)
        return True

    def publish(self, bodies: list[bytes], defer_ms: int = 0) -> None:
        """Publish all of ``bodies`` or none (raises :class:`QueueFull`)."""
        n = len(bodies)
        limit = self.options.mem_queue_size
        channels = list(self.channels.values()) if not (self.paused or self.held) else []
        if channels:
            for channel in channels:
                if channel.room() < n:
                    raise QueueFull(
                        f"channel {self.name}:{channel.name} is full "
                        f"(mem-queue-size {limit}; the embedded broker has no disk queue)"
                    )
        elif len(self.pending) + n > limit:
            raise QueueFull(
                f"topic {self.name} is full (mem-queue-size {limit}; "
                "the embedded broker has no disk queue)"
            )
        ts = now_ns()
        ids = self.ids.next_ids(n)
        self.message_count += n
        self.message_bytes += sum(map(len, bodies))
        items: list[Item]
        if defer_ms > 0:
            items = [
                BrokerMessage(i, body, ts, defer_ms) for i, body in zip(ids, bodies, strict=True)
            ]
        else:
            # Plain tuples until first delivery: publishing stays cheap, and every
            # channel can share them (a BrokerMessage is made per channel on delivery).
            items = list(zip(ids, bodies, repeat(ts)))
        if not channels:
            self.pending.extend(items)
            return
        now = self.loop.time()
        for channel in channels:
            channel.put_many(items, now, fresh=defer_ms <= 0)

    def hold(self) -> None:
        """Keep published messages in the topic until :meth:`release`: nsqd starts a
        new topic only once the channels lookupds know of exist, so they all get them."""
        self.held = True

    def release(self) -> None:
        self.held = False
        self.set_paused(self.paused)

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if not paused and not self.held and self.pending and self.channels:
            pending, self.pending = list(self.pending), deque()
            now = self.loop.time()
            for channel in self.channels.values():
                channel.put_many(pending, now)

    def empty(self) -> None:
        self.pending.clear()

    def close(self) -> None:
        self.deleted = True
        for name in list(self.channels):
            channel = self.channels.pop(name)
            channel.close()
        self.pending.clear()

    def stats(self, channel: str | None = None, include_clients: bool = True) -> dict[str, Any]:
        names = sorted(self.channels)
        if channel is not None:
            names = [n for n in names if n == channel]
        return {
            "topic_name": self.name,
            "channels": [self.channels[n].stats(include_clients) for n in names],
            "depth": len(self.pending),
            "backend_depth": 0,
            "message_count": self.message_count,
            "message_bytes": self.message_bytes,
            "paused": self.paused,
            "e2e_processing_latency": {"count": 0, "percentiles": None},
        }

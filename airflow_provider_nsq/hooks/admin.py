"""``NSQAdminHook``: nsqd's HTTP API through an ``nsq`` Connection (its ``http_port``, or
``https_port`` with TLS): how many messages a channel holds, without taking any."""

from __future__ import annotations

from ..client.http.channel_depth import ChannelDepthReader
from ..client.http.nsqd_api import ChannelDepth, NSQDHTTPClient
from .base import NSQBaseHook

__all__ = ["NSQAdminHook"]


class NSQAdminHook(NSQBaseHook):
    """nsqd's HTTP API (the admin side of NSQ, as Kafka's admin client hook is Kafka's)
    through an Airflow Connection of type ``nsq``.

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    def get_http_api(self) -> NSQDHTTPClient | None:
        """nsqd's HTTP API as the connection describes it (``http_port``, or
        ``https_port`` with TLS on); None when the connection names neither.

        Call :meth:`aget_settings` first in a trigger, or let this read the connection.
        """
        return NSQDHTTPClient.from_settings(self.get_settings())

    def channel_depth(self, topic: str, channel: str) -> ChannelDepth | None:
        """What ``channel`` holds, from nsqd's ``/stats`` (every producer nsqlookupd
        lists, or the connection's nsqd on its ``http_port``); no message is taken.

        A durable channel that does not exist yet is **created** there, its topic first
        (``POST /topic/create``, then ``/channel/create``), as a ``SUB`` would: every
        message published to the topic from then on waits on the channel for the next
        check (the sensor's next poke). Without it, nsqd would give the topic's messages
        to its other channels only, and the depth read here would stay 0 while they
        pass. So a channel only ever checked keeps what is published until it is
        consumed: delete it (nsqd's ``POST /channel/delete``) when nothing reads it any
        more. ``#ephemeral`` channels are never created.

        :param topic: the topic name.
        :param channel: the channel name.
        :return: the channel's depth; None when no HTTP API is known (nothing is created
            then; see :mod:`~airflow_provider_nsq.client.http.channel_depth`).
        """
        return ChannelDepthReader(self.get_settings()).read(topic, channel)

    async def achannel_depth(self, topic: str, channel: str) -> ChannelDepth | None:
        """:meth:`channel_depth` for triggers (asyncio, no thread; producers at once):
        creates a missing durable channel the same way."""
        return await ChannelDepthReader(await self.aget_settings()).aread(topic, channel)

"""How many messages wait on a channel, over every nsqd of a connection, read from their
HTTP APIs: no message is taken, so no ``attempts`` go up.

With nsqlookupd: summed over every producer it lists, each on the HTTP port it announced.
Without: the connection's nsqd on its ``http_port`` (or ``https_port`` with TLS); unknown
(None) when it gives neither, or when the connection lists several nsqds, whose HTTP
ports it does not know. Asking creates the channel when it is missing (as a SUB would),
so messages published from then on wait for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..protocol.names import validate_channel_name
from .connection_settings import ConnectionSettings
from .lookupd import LookupdClient, Producer
from .nsqd_http import ChannelDepth, NSQDHTTPClient, combine_depths


class ChannelDepthReader:
    """Reads a channel's depth for one connection's settings (blocking or asyncio).

    :param settings: the connection's settings (its nsqds, nsqlookupds, HTTP ports).
    """

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        lookupds = settings.lookupd_http_addresses
        self.lookupd = (
            LookupdClient(lookupds, timeout=settings.client.connect_timeout) if lookupds else None
        )

    def read(self, topic: str, channel: str) -> ChannelDepth | None:
        """What ``channel`` holds (None: no HTTP API is known). NSQError subclasses
        when an API cannot be read."""
        if self.lookupd is not None:
            validate_channel_name(channel)
            apis = self._producer_apis(self.lookupd.lookup(topic))
            depths = [api.channel_depth(topic, channel, create=True) for api in apis]
            return combine_depths(topic, channel, depths)
        api = self._single_api()
        return None if api is None else api.channel_depth(topic, channel, create=True)

    async def aread(self, topic: str, channel: str) -> ChannelDepth | None:
        """:meth:`read` on the event loop (no thread; every producer asked at once)."""
        if self.lookupd is not None:
            validate_channel_name(channel)
            apis = self._producer_apis(await self.lookupd.alookup(topic))
            depths = await asyncio.gather(
                *(api.achannel_depth(topic, channel, create=True) for api in apis)
            )
            return combine_depths(topic, channel, depths)
        api = self._single_api()
        return None if api is None else await api.achannel_depth(topic, channel, create=True)

    def _single_api(self) -> NSQDHTTPClient | None:
        if len(self.settings.nsqds) > 1:
            return None  # the other nsqds' HTTP ports are unknown: a window is the check
        return self.settings.http_api()

    def _producer_apis(self, producers: Sequence[Producer]) -> list[NSQDHTTPClient]:
        """The HTTP API of each producer, on the port it announced to nsqlookupd."""
        timeout = self.settings.client.connect_timeout
        return [
            NSQDHTTPClient(p.broadcast_address, p.http_port, timeout=timeout) for p in producers
        ]

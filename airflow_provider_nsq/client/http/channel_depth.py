"""How many messages wait on a channel, over every nsqd of a connection, read from their
HTTP APIs: no message is taken, so no ``attempts`` go up.

With nsqlookupd: summed over every producer it lists, each on the HTTP port it announced.
Without: the connection's nsqd on its ``http_port`` (or ``https_port`` with TLS); unknown
(None) when it gives neither, or when the connection lists several nsqds, whose HTTP
ports it does not know. Asking creates the channel when it is missing (as a SUB would),
so messages published from then on wait for it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from ...protocol.errors import NSQError
from ...protocol.names import validate_channel_name
from ..runners.asyncio_runner import arun
from ..runners.blocking_runner import run
from ..runners.steps import Gather, HTTPStep
from ..settings.connection_settings import ConnectionSettings
from .lookupd_api import LookupdClient, Producer
from .nsqd_api import ChannelDepth, NSQDHTTPClient, combine_depths


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
        return run(self.read_steps(topic, channel))

    async def aread(self, topic: str, channel: str) -> ChannelDepth | None:
        """:meth:`read` on the event loop (no thread)."""
        return await arun(self.read_steps(topic, channel))

    def read_steps(
        self, topic: str, channel: str
    ) -> Generator[HTTPStep, list[ChannelDepth | NSQError], ChannelDepth | None]:
        """:meth:`read` as steps (:mod:`..runners.steps`): every producer asked at once."""
        if self.lookupd is None:
            api = self._single_api()
            if api is None:
                return None
            return (yield from api.channel_depth_steps(topic, channel, create=True))
        validate_channel_name(channel)
        producers = yield from self.lookupd.lookup_steps(topic)
        apis = self._producer_apis(producers)
        depths = yield Gather(
            tuple(api.channel_depth_steps(topic, channel, create=True) for api in apis)
        )
        found: list[ChannelDepth] = []
        for depth in depths:
            if isinstance(depth, NSQError):
                raise depth  # an API that cannot be read: the caller falls back
            found.append(depth)
        return combine_depths(topic, channel, found)

    def _single_api(self) -> NSQDHTTPClient | None:
        if len(self.settings.nsqds) > 1:
            return None  # the other nsqds' HTTP ports are unknown: a window is the check
        return NSQDHTTPClient.from_settings(self.settings)

    def _producer_apis(self, producers: Sequence[Producer]) -> list[NSQDHTTPClient]:
        """The HTTP API of each producer, on the port it announced to nsqlookupd."""
        timeout = self.settings.client.connect_timeout
        return [
            NSQDHTTPClient(p.broadcast_address, p.http_port, timeout=timeout) for p in producers
        ]

"""``NSQAdminHook``: nsqd's and nsqlookupd's HTTP APIs through an ``nsq`` Connection (its
``http_port``, or ``https_port`` with TLS; its ``lookupd_http_addresses``): how many
messages a channel holds, without taking any; and administration: create, delete,
empty, pause and unpause a topic or a channel, on every nsqd of the topic or on one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..client.http.admin_api import NSQAdmin
from ..client.http.channel_depth import ChannelDepthReader
from ..client.http.nsqd_api import AdminAction, ChannelDepth, NSQDHTTPClient
from .base import NSQBaseHook

__all__ = ["NSQAdminHook", "NSQDs"]

#: Where administration acts: None (every nsqd of the topic), or ``host:http_port`` of
#: one nsqd (or a list of them).
NSQDs = str | Sequence[str] | None


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
        consumed: delete it (:meth:`delete_channel`, or the
        :class:`~airflow_provider_nsq.operators.nsq_admin.NSQDeleteChannelOperator`)
        when nothing reads it any more. ``#ephemeral`` channels are never created.

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

    # -- administration ----------------------------------------------------------------
    # Each acts on every nsqd of the topic: those the connection's nsqlookupds list (and,
    # for create and delete, the lookupds' registry too, as nsqadmin does), or the
    # connection's own nsqds on its http_port; or only on ``nsqd`` ("host:http_port").
    # Each returns what happened per nsqd (AdminResult.as_dict(): JSON-safe, for XCom)
    # and raises NSQAdminError, after the rest was done, naming what it could not reach.

    def get_admin(self, nsqd: NSQDs = None) -> NSQAdmin:
        """The administration client for this connection (or for the nsqds ``nsqd``
        names): :class:`~airflow_provider_nsq.client.http.admin_api.NSQAdmin`."""
        return NSQAdmin.from_settings(self.get_settings(), nsqd)

    def _administer(
        self,
        action: AdminAction,
        topic: str,
        channel: str | None,
        nsqd: NSQDs,
        *,
        fail_if_exists: bool = False,
        fail_if_not_exists: bool = False,
    ) -> dict[str, Any]:
        result = self.get_admin(nsqd).run(action, topic, channel)
        self.log.info(
            "%s %s: nsqds %s, nsqlookupds %s%s",
            action.capitalize(),
            result.what,
            result.nsqds or "none",
            result.lookupds or "not asked",
            f"; failed: {result.errors}" if result.errors else "",
        )
        result.check(fail_if_exists=fail_if_exists, fail_if_not_exists=fail_if_not_exists)
        return result.as_dict()

    def create_topic(
        self, topic: str, *, nsqd: NSQDs = None, fail_if_exists: bool = False
    ) -> dict[str, Any]:
        """Create ``topic`` (``exists`` where it was there; with ``fail_if_exists``, that
        raises :class:`~airflow_provider_nsq.protocol.errors.NSQAdminError`). Through
        nsqlookupd, a topic no nsqd has yet is recorded in the lookupds only: nsqds
        create it, and the channels the lookupds list, when it is first published to.

        :return: ``{"action", "topic", "channel", "nsqds": {host:http_port: outcome},
            "lookupds": {...}, "errors": {...}}``.
        """
        return self._administer("create", topic, None, nsqd, fail_if_exists=fail_if_exists)

    def delete_topic(
        self, topic: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = False
    ) -> dict[str, Any]:
        """Delete ``topic``, its channels and every message they hold (``not_found``
        where it was gone; with ``fail_if_not_exists``, that raises). Through
        nsqlookupd, deleted from the lookupds' registry too (``nsqd`` not given)."""
        return self._administer("delete", topic, None, nsqd, fail_if_not_exists=fail_if_not_exists)

    def empty_topic(
        self, topic: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = True
    ) -> dict[str, Any]:
        """Drop the messages ``topic`` holds itself: those not yet handed to a channel
        (a paused topic's, or one without channels). Its channels keep theirs: empty
        each with :meth:`empty_channel`."""
        return self._administer("empty", topic, None, nsqd, fail_if_not_exists=fail_if_not_exists)

    def pause_topic(
        self, topic: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = True
    ) -> dict[str, Any]:
        """Pause ``topic``: messages published to it wait in the topic, none reaches its
        channels, until :meth:`unpause_topic`."""
        return self._administer("pause", topic, None, nsqd, fail_if_not_exists=fail_if_not_exists)

    def unpause_topic(
        self, topic: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = True
    ) -> dict[str, Any]:
        """Unpause ``topic``: what waited goes to its channels."""
        return self._administer("unpause", topic, None, nsqd, fail_if_not_exists=fail_if_not_exists)

    def create_channel(
        self, topic: str, channel: str, *, nsqd: NSQDs = None, fail_if_exists: bool = False
    ) -> dict[str, Any]:
        """Create ``channel`` (its topic first where missing): from then on every
        message published to the topic waits on it. Through nsqlookupd, recorded in the
        lookupds too, so that an nsqd that gets the topic later creates the channel."""
        return self._administer("create", topic, channel, nsqd, fail_if_exists=fail_if_exists)

    def delete_channel(
        self, topic: str, channel: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = False
    ) -> dict[str, Any]:
        """Delete ``channel`` and every message it holds (its consumers are
        disconnected); through nsqlookupd, from the lookupds' registry too."""
        return self._administer(
            "delete", topic, channel, nsqd, fail_if_not_exists=fail_if_not_exists
        )

    def empty_channel(
        self, topic: str, channel: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = True
    ) -> dict[str, Any]:
        """Drop every message ``channel`` holds: ready, deferred and in flight."""
        return self._administer(
            "empty", topic, channel, nsqd, fail_if_not_exists=fail_if_not_exists
        )

    def pause_channel(
        self, topic: str, channel: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = True
    ) -> dict[str, Any]:
        """Pause ``channel``: it keeps receiving messages and delivers none, until
        :meth:`unpause_channel`."""
        return self._administer(
            "pause", topic, channel, nsqd, fail_if_not_exists=fail_if_not_exists
        )

    def unpause_channel(
        self, topic: str, channel: str, *, nsqd: NSQDs = None, fail_if_not_exists: bool = True
    ) -> dict[str, Any]:
        """Unpause ``channel``: it delivers again."""
        return self._administer(
            "unpause", topic, channel, nsqd, fail_if_not_exists=fail_if_not_exists
        )

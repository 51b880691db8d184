"""Operators that administer NSQ: create, delete, empty, pause and unpause a topic or a
channel, named as the Google provider names its Pub/Sub ones
(``PubSubCreateTopicOperator``, ``PubSubDeleteTopicOperator`` ...).

Each acts on every nsqd of the topic (those the connection's nsqlookupds list, or the
connection's own nsqds on its ``http_port``), or only on ``nsqd`` (``host:http_port``,
or a list), through :class:`~airflow_provider_nsq.hooks.admin.NSQAdminHook`, and returns
what happened on each nsqd to XCom::

    {"action": "delete_channel", "topic": "orders", "channel": "etl",
     "nsqds": {"10.0.0.5:4151": "deleted", "10.0.0.6:4151": "not_found"},
     "lookupds": {"10.0.0.9:4161": "deleted"}, "errors": {}}

An nsqd that could not be reached (or refused) fails the task, naming it, after every
other nsqd was done. Creating what exists and deleting what is gone succeed, unless
``fail_if_exists`` / ``fail_if_not_exists``; emptying, pausing or unpausing what does
not exist fails, unless ``fail_if_not_exists=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import BaseOperator

from ..client.http.nsqd_api import AdminAction
from ..hooks.admin import NSQAdminHook
from ..protocol.errors import NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_bool
from ..templated import is_templated

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class _NSQAdminOperator(BaseOperator):
    """One administration call on a topic (``channel`` None) or a channel."""

    template_fields: Sequence[str] = ("topic", "nsqd", "nsq_conn_id")
    ui_color = "#e0d5f0"
    action: ClassVar[AdminAction]
    #: Whether it acts on a channel (else on the topic).
    on_channel: ClassVar[bool] = False
    #: The default of its option: ``fail_if_exists`` for create, else
    #: ``fail_if_not_exists``.
    fail_default: ClassVar[bool] = False

    def __init__(
        self,
        *,
        topic: str,
        channel: str | None = None,
        nsqd: str | Sequence[str] | None = None,
        fail_if_exists: bool | None = None,
        fail_if_not_exists: bool | None = None,
        nsq_conn_id: str = NSQAdminHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        given, other = (fail_if_exists, fail_if_not_exists)
        if self.action != "create":
            given, other = other, given
        if other is not None:
            raise NSQValueError(
                f"{type(self).__name__} takes {self._option}, not "
                f"{'fail_if_not_exists' if self.action == 'create' else 'fail_if_exists'}"
            )
        self.topic = topic
        self.channel = channel
        self.nsqd = nsqd
        self.fail = self.fail_default if given is None else check_bool(given, self._option)
        self.nsq_conn_id = nsq_conn_id
        self._check_names()

    @property
    def _option(self) -> str:
        return "fail_if_exists" if self.action == "create" else "fail_if_not_exists"

    def _check_names(self) -> None:
        if not is_templated(self.topic):
            validate_topic_name(self.topic)
        if self.on_channel and not is_templated(self.channel):
            validate_channel_name(self.channel)

    @cached_property
    def hook(self) -> NSQAdminHook:
        return NSQAdminHook(nsq_conn_id=self.nsq_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        self._check_names()  # rendered now
        suffix = "channel" if self.on_channel else "topic"
        method = getattr(self.hook, f"{self.action}_{suffix}")
        args = (self.topic, self.channel) if self.on_channel else (self.topic,)
        nsqd = self.nsqd or None  # a template that rendered empty: every nsqd
        return method(*args, nsqd=nsqd, **{self._option: self.fail})


class _TopicOperator(_NSQAdminOperator):
    def __init__(
        self,
        *,
        topic: str,
        nsqd: str | Sequence[str] | None = None,
        fail_if_exists: bool | None = None,
        fail_if_not_exists: bool | None = None,
        nsq_conn_id: str = NSQAdminHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            topic=topic,
            nsqd=nsqd,
            fail_if_exists=fail_if_exists,
            fail_if_not_exists=fail_if_not_exists,
            nsq_conn_id=nsq_conn_id,
            **kwargs,
        )


class _ChannelOperator(_NSQAdminOperator):
    template_fields: Sequence[str] = ("topic", "channel", "nsqd", "nsq_conn_id")
    on_channel = True

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        nsqd: str | Sequence[str] | None = None,
        fail_if_exists: bool | None = None,
        fail_if_not_exists: bool | None = None,
        nsq_conn_id: str = NSQAdminHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            topic=topic,
            channel=channel,
            nsqd=nsqd,
            fail_if_exists=fail_if_exists,
            fail_if_not_exists=fail_if_not_exists,
            nsq_conn_id=nsq_conn_id,
            **kwargs,
        )


class NSQCreateTopicOperator(_TopicOperator):
    """Create a topic on every nsqd of the connection (through nsqlookupd: in the
    lookupds' registry, and on the nsqds that have it), or on ``nsqd``.

    :param topic: the topic (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list; None: every
        nsqd (templated).
    :param fail_if_exists: fail when an nsqd has it already (default: succeed, the
        nsqd's outcome ``exists``).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "create"


class NSQDeleteTopicOperator(_TopicOperator):
    """Delete a topic, its channels and their messages, on every nsqd of the topic (and
    in the nsqlookupds' registry), or on ``nsqd``.

    :param topic: the topic (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd does not have it (default: succeed,
        ``not_found``).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "delete"


class NSQEmptyTopicOperator(_TopicOperator):
    """Drop the messages a topic holds itself (not yet handed to a channel: a paused
    topic's, or one with no channel); its channels keep theirs
    (:class:`NSQEmptyChannelOperator`).

    :param topic: the topic (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd (or every nsqd) does not have it
        (default True).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "empty"
    fail_default = True


class NSQPauseTopicOperator(_TopicOperator):
    """Pause a topic: what is published waits in the topic, none reaches its channels.

    :param topic: the topic (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd (or every nsqd) does not have it
        (default True).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "pause"
    fail_default = True


class NSQUnpauseTopicOperator(_TopicOperator):
    """Unpause a topic: what waited goes to its channels.

    :param topic: the topic (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd (or every nsqd) does not have it
        (default True).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "unpause"
    fail_default = True


class NSQCreateChannelOperator(_ChannelOperator):
    """Create a channel (its topic first where missing) on every nsqd of the topic (and
    in the nsqlookupds' registry, so that an nsqd that gets the topic later creates it
    too), or on ``nsqd``: from then on every message published waits on it.

    :param topic: the topic (templated).
    :param channel: the channel (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_exists: fail when an nsqd has it already (default: succeed).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "create"


class NSQDeleteChannelOperator(_ChannelOperator):
    """Delete a channel and its messages (its consumers are disconnected) on every nsqd
    of the topic (and in the nsqlookupds' registry), or on ``nsqd``.

    :param topic: the topic (templated).
    :param channel: the channel (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd does not have it (default: succeed).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "delete"


class NSQEmptyChannelOperator(_ChannelOperator):
    """Drop every message a channel holds (ready, deferred, in flight).

    :param topic: the topic (templated).
    :param channel: the channel (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd (or every nsqd) does not have it
        (default True).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "empty"
    fail_default = True


class NSQPauseChannelOperator(_ChannelOperator):
    """Pause a channel: it keeps receiving messages and delivers none.

    :param topic: the topic (templated).
    :param channel: the channel (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd (or every nsqd) does not have it
        (default True).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "pause"
    fail_default = True


class NSQUnpauseChannelOperator(_ChannelOperator):
    """Unpause a channel: it delivers again.

    :param topic: the topic (templated).
    :param channel: the channel (templated).
    :param nsqd: ``host:http_port`` of the one nsqd to act on, or a list (templated).
    :param fail_if_not_exists: fail when an nsqd (or every nsqd) does not have it
        (default True).
    :param nsq_conn_id: the ``nsq`` Connection (templated).
    """

    action = "unpause"
    fail_default = True

"""Operators that publish to NSQ: PUB, DPUB and MPUB.

Each one validates its literal arguments when the DAG is parsed (no network then,
unless ``asset_outlet=True``, which reads the connection for the asset's address:
deprecated, give the address, ``asset_outlet="host:port"``),
builds an :class:`~airflow_provider_nsq.hooks.nsq.NSQHook` in ``execute``, makes one call
and returns the hook's small result dict, which goes to XCom. Each counts what it
published in the ``nsq.publish.*`` metrics (docs/metrics.md), links to the topic's page
in nsqadmin (with the connection's ``nsqadmin_url``), and names the topic as its
OpenLineage output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from ..assets import address_read_at_parse, nsq_asset
from ..client import encode_body
from ..client.settings.values import Delay, delay_to_ms, is_templated
from ..hooks.nsq import NSQHook
from ..lineage import publish_lineage
from ..links import NSQAdminTopicLink
from ..metrics import PublishKind, emitter, task_tags
from ..protocol.errors import NSQValueError
from ..protocol.names import validate_topic_name

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


def check_topic(topic: object) -> None:
    """Validate a literal topic now; a templated one is validated after rendering."""
    if not is_templated(topic):
        validate_topic_name(topic)


def check_message(message: object, what: str = "message") -> None:
    """Validate a literal message body now (type, JSON-serialisable, not empty)."""
    if is_templated(message):
        return
    body = encode_body(message, what)  # its errors name ``what`` once
    if not body:
        raise NSQValueError(f"{what} is empty: nsqd refuses zero-length bodies")


def check_delay(delay: object) -> None:
    """Validate a literal delay now (type and sign; the upper bound needs the connection)."""
    if not is_templated(delay):
        delay_to_ms(delay)


def coerce_delay(delay: Any) -> Delay:
    """A rendered delay: int ms and timedelta pass; a rendered string of digits is ms."""
    if isinstance(delay, str) and delay.strip().isdigit():
        return int(delay.strip())
    return delay


_METRICS = emitter("task")


class _NSQPublishBase(BaseOperator):
    ui_color = "#3c8dbc"
    operator_extra_links = (NSQAdminTopicLink(),)
    #: The metric names' publish kind (nsq.publish.<kind>.*).
    publish_kind: PublishKind

    def __init__(
        self,
        *,
        topic: str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        asset_outlet: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_topic(topic)
        self.topic = topic
        self.nsq_conn_id = nsq_conn_id
        if asset_outlet:
            self.outlets = [*self.outlets, _topic_asset(topic, nsq_conn_id, asset_outlet)]

    @cached_property
    def hook(self) -> NSQHook:
        return NSQHook(nsq_conn_id=self.nsq_conn_id)

    def on_kill(self) -> None:
        self.hook.close()

    def _publish(self, context: Context, call: Callable[[NSQHook], dict[str, Any]]) -> dict:
        """Make the hook call and count it (nsq.publish.<kind>.*)."""
        tags = task_tags(context, topic=self.topic)
        try:
            with self.hook as hook:
                result = call(hook)
        except Exception as exc:
            _METRICS.incr(
                f"nsq.publish.{self.publish_kind}.errors", error=type(exc).__name__, **tags
            )
            raise
        _METRICS.incr(f"nsq.publish.{self.publish_kind}.messages", result["messages"], **tags)
        _METRICS.incr(f"nsq.publish.{self.publish_kind}.bytes", result["bytes"], **tags)
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the topic as the output dataset (needs the ``openlineage``
        extra)."""
        return publish_lineage(self.hook, self.topic)


def _topic_asset(topic: str, nsq_conn_id: str, asset_outlet: bool | str) -> Any:
    """The outlet of ``asset_outlet``: fixed when the DAG is parsed."""
    if isinstance(asset_outlet, str):
        if is_templated(topic):
            raise NSQValueError(
                f"asset_outlet={asset_outlet!r} needs a literal topic: the asset is fixed "
                f"when the DAG is parsed, got topic={topic!r}"
            )
        return nsq_asset(topic, address=asset_outlet)
    if is_templated(topic) or is_templated(nsq_conn_id):
        raise NSQValueError(
            "asset_outlet=True needs a literal topic and nsq_conn_id: the asset is fixed "
            f"when the DAG is parsed, got topic={topic!r}, nsq_conn_id={nsq_conn_id!r}"
        )
    address = address_read_at_parse(nsq_conn_id, "asset_outlet=True", "asset_outlet={address!r}")
    return nsq_asset(topic, address=address)


class NSQPublishOperator(_NSQPublishBase):
    """Publish one message to an NSQ topic (PUB); succeeds after nsqd's OK.

    :param topic: the topic name (templated).
    :param message: str (sent as UTF-8), bytes, or a dict/list (sent as compact JSON)
        (templated).
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    :param asset_outlet: declare the topic's asset (``nsq://host:port/topic``, see
        :func:`~airflow_provider_nsq.assets.nsq_asset`) as an outlet, so DAGs scheduled
        on it run after this task: ``"host:port"``, the cluster's address as the
        connection names it. ``True`` reads it from the connection when the DAG is parsed
        (deprecated: warns with the address to write).
    Returns ``{"topic": ..., "messages": 1, "bytes": ...}`` (pushed to XCom).
    """

    template_fields: Sequence[str] = ("topic", "message", "nsq_conn_id")
    publish_kind: PublishKind = "pub"

    def __init__(
        self,
        *,
        topic: str,
        message: str | bytes | dict | list,
        nsq_conn_id: str = NSQHook.default_conn_name,
        asset_outlet: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(topic=topic, nsq_conn_id=nsq_conn_id, asset_outlet=asset_outlet, **kwargs)
        check_message(message)
        self.message = message

    def execute(self, context: Context) -> dict[str, Any]:
        result = self._publish(context, lambda hook: hook.publish(self.topic, self.message))
        self.log.info("PUB %s: %s bytes", self.topic, result["bytes"])
        return result


class NSQDeferredPublishOperator(_NSQPublishBase):
    """Publish one message that nsqd delivers after a delay (DPUB).

    :param topic: the topic name (templated).
    :param message: str, bytes, or a JSON-serialisable dict/list (templated).
    :param delay: ``timedelta`` or whole milliseconds, up to the connection's
        ``max_req_timeout_ms`` (nsqd's --max-req-timeout, 1 h by default); never clamped
        (templated: a rendered string of digits is milliseconds).
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    :param asset_outlet: declare the topic's asset as an outlet (see
        :class:`NSQPublishOperator`).
    Returns ``{"topic", "messages": 1, "bytes", "delay_ms"}`` (pushed to XCom).
    """

    template_fields: Sequence[str] = ("topic", "message", "delay", "nsq_conn_id")
    publish_kind: PublishKind = "dpub"

    def __init__(
        self,
        *,
        topic: str,
        message: str | bytes | dict | list,
        delay: Delay | str,
        nsq_conn_id: str = NSQHook.default_conn_name,
        asset_outlet: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(topic=topic, nsq_conn_id=nsq_conn_id, asset_outlet=asset_outlet, **kwargs)
        check_message(message)
        check_delay(delay)
        self.message = message
        self.delay = delay

    def execute(self, context: Context) -> dict[str, Any]:
        result = self._publish(
            context,
            lambda hook: hook.defer_publish(self.topic, self.message, coerce_delay(self.delay)),
        )
        self.log.info(
            "DPUB %s: %s bytes, delay %s ms", self.topic, result["bytes"], result["delay_ms"]
        )
        return result


class NSQMultiPublishOperator(_NSQPublishBase):
    """Publish a batch of messages to one topic (MPUB); succeeds after nsqd's OK.

    Batches larger than nsqd's ``max_body_size`` go out as several MPUB frames.

    :param topic: the topic name (templated).
    :param messages: a list of str / bytes / dict / list items, or an upstream task's
        output (``XComArg``), resolved when the task runs (templated).
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    :param asset_outlet: declare the topic's asset as an outlet (see
        :class:`NSQPublishOperator`).
    Returns ``{"topic", "messages": <count>, "bytes": <total>}`` (pushed to XCom).
    """

    template_fields: Sequence[str] = ("topic", "messages", "nsq_conn_id")
    publish_kind: PublishKind = "mpub"

    def __init__(
        self,
        *,
        topic: str,
        messages: Any,
        nsq_conn_id: str = NSQHook.default_conn_name,
        asset_outlet: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(topic=topic, nsq_conn_id=nsq_conn_id, asset_outlet=asset_outlet, **kwargs)
        if isinstance(messages, (list, tuple)):
            if not messages:
                raise NSQValueError("messages is empty: MPUB needs at least one message")
            for i, message in enumerate(messages):
                check_message(message, what=f"messages[{i}]")
        elif isinstance(messages, (bytes, dict)) or (
            isinstance(messages, str) and not is_templated(messages)
        ):
            raise NSQValueError(
                "messages must be a list of messages or an upstream task's output (XComArg), "
                f"got a single {type(messages).__name__}; use NSQPublishOperator for one message"
            )
        self.messages = messages

    def execute(self, context: Context) -> dict[str, Any]:
        messages = self.messages
        if isinstance(messages, (str, bytes, dict)) or not hasattr(messages, "__iter__"):
            raise NSQValueError(
                f"messages rendered to a {type(messages).__name__}, expected a list of messages"
            )
        result = self._publish(context, lambda hook: hook.multi_publish(self.topic, list(messages)))
        self.log.info(
            "MPUB %s: %s messages, %s bytes", self.topic, result["messages"], result["bytes"]
        )
        return result

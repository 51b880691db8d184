"""Operators that publish to NSQ: PUB, DPUB and MPUB.

Each one checks its literal arguments when the DAG is parsed (no network, no connection
read) and its templated ones once rendered, builds an
:class:`~airflow_provider_nsq.hooks.producer.NSQProducerHook` (the Connection is read
once per task), makes one call in ``execute`` and returns the hook's small result dict,
which goes to XCom. Each counts what it published in the ``nsq.publish.*`` metrics
(docs/metrics.md), links to the topic's page in nsqadmin (with the connection's
``nsqadmin_url``), and names the topic as its OpenLineage output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from ..assets import nsq_asset
from ..client.bodies import encode_body
from ..client.settings.values import Delay, delay_to_ms
from ..hooks.producer import NSQProducerHook
from ..lineage import publish_lineage
from ..links import NSQAdminTopicLink
from ..metrics import PublishKind, task_emitter
from ..protocol.errors import NSQValueError
from ..protocol.names import validate_topic_name
from ..templated import is_templated, rendered_delay

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

__all__ = ["NSQDeferredPublishOperator", "NSQMultiPublishOperator", "NSQPublishOperator"]


def _check_message(message: object, what: str = "message") -> None:
    """Check a literal message body now (type, JSON-serialisable, not empty)."""
    if is_templated(message):
        return
    body = encode_body(message, what)  # its errors name ``what`` once
    if not body:
        raise NSQValueError(f"{what} is empty: nsqd refuses zero-length bodies")


class _NSQPublishBase(BaseOperator):
    ui_color = "#3c8dbc"
    operator_extra_links = (NSQAdminTopicLink(),)
    #: The metric names' publish kind (nsq.publish.<kind>.*).
    publish_kind: PublishKind

    def __init__(
        self,
        *,
        topic: str,
        nsq_conn_id: str = NSQProducerHook.default_conn_name,
        asset_outlet: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # The topic is checked once: here when literal, in execute once rendered; the
        # protocol's encoder checks it again as it writes the command.
        self._topic_rendered_unchecked = is_templated(topic)
        if not self._topic_rendered_unchecked:
            validate_topic_name(topic)
        self.topic = topic
        self.nsq_conn_id = nsq_conn_id
        if asset_outlet is not None:
            self.outlets = [*self.outlets, _topic_asset(topic, asset_outlet)]

    @cached_property
    def hook(self) -> NSQProducerHook:
        return NSQProducerHook(nsq_conn_id=self.nsq_conn_id)

    def on_kill(self) -> None:
        self.hook.close()

    def _publish(
        self, context: Context, publish: Callable[..., dict[str, Any]], *args: Any
    ) -> dict[str, Any]:
        """``publish(topic, *args)`` (a method of :attr:`hook`) with the rendered topic,
        checked if it was a template; counted in the nsq.publish.<kind>.* metrics. The
        hook's connection is closed after it (the hook keeps the settings it read)."""
        kind = self.publish_kind
        try:
            if self._topic_rendered_unchecked:
                validate_topic_name(self.topic)
            result = publish(self.topic, *args)
        except Exception as exc:
            task_emitter(context, topic=self.topic).incr(
                f"nsq.publish.{kind}.errors", error=type(exc).__name__
            )
            raise
        finally:
            self.hook.close()
        metrics = task_emitter(context, topic=self.topic)
        metrics.incr(f"nsq.publish.{kind}.messages", result["messages"])
        metrics.incr(f"nsq.publish.{kind}.bytes", result["bytes"])
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the topic as the output dataset (needs the ``openlineage``
        extra)."""
        return publish_lineage(self.hook, self.topic)


def _topic_asset(topic: str, asset_outlet: object) -> Any:
    """The outlet of ``asset_outlet``: fixed when the DAG is parsed, from the address the
    DAG file writes (a DAG file's top-level code reads no connection)."""
    if not isinstance(asset_outlet, str):
        raise NSQValueError(
            f"asset_outlet takes the NSQ cluster's address as the connection names it, "
            f'asset_outlet="host:port" (its first nsqlookupd, else its nsqd), got '
            f"{asset_outlet!r}: the address is written in the DAG file, never read from "
            "the connection when the DAG is parsed"
        )
    if is_templated(topic):
        raise NSQValueError(
            f"asset_outlet={asset_outlet!r} needs a literal topic: the asset is fixed "
            f"when the DAG is parsed, got topic={topic!r}"
        )
    return nsq_asset(topic, address=asset_outlet)


class NSQPublishOperator(_NSQPublishBase):
    """Publish one message to an NSQ topic (PUB); succeeds after nsqd's OK.

    :param topic: the topic name (templated).
    :param message: str (sent as UTF-8), bytes, or a dict/list (sent as compact JSON)
        (templated).
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    :param asset_outlet: declare the topic's asset (``nsq://host:port/topic``, see
        :func:`~airflow_provider_nsq.assets.nsq_asset`) as an outlet, so DAGs scheduled
        on it run after this task: ``"host:port"``, the cluster's address as the
        connection names it (its first nsqlookupd, else its nsqd).
    Returns ``{"topic": ..., "messages": 1, "bytes": ...}`` (pushed to XCom).
    """

    template_fields: Sequence[str] = ("topic", "message", "nsq_conn_id")
    publish_kind: PublishKind = "pub"

    def __init__(
        self,
        *,
        topic: str,
        message: str | bytes | dict | list,
        nsq_conn_id: str = NSQProducerHook.default_conn_name,
        asset_outlet: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(topic=topic, nsq_conn_id=nsq_conn_id, asset_outlet=asset_outlet, **kwargs)
        _check_message(message)
        self.message = message

    def execute(self, context: Context) -> dict[str, Any]:
        result = self._publish(context, self.hook.publish, self.message)
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
        nsq_conn_id: str = NSQProducerHook.default_conn_name,
        asset_outlet: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(topic=topic, nsq_conn_id=nsq_conn_id, asset_outlet=asset_outlet, **kwargs)
        _check_message(message)
        if not is_templated(delay):
            delay_to_ms(delay)  # type and sign; the upper bound needs the connection
        self.message = message
        self.delay = delay

    def execute(self, context: Context) -> dict[str, Any]:
        delay = rendered_delay(self.delay)
        result = self._publish(context, self.hook.defer_publish, self.message, delay)
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
        nsq_conn_id: str = NSQProducerHook.default_conn_name,
        asset_outlet: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(topic=topic, nsq_conn_id=nsq_conn_id, asset_outlet=asset_outlet, **kwargs)
        if isinstance(messages, (list, tuple)):
            if not messages:
                raise NSQValueError("messages is empty: MPUB needs at least one message")
            for i, message in enumerate(messages):
                _check_message(message, what=f"messages[{i}]")
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
        result = self._publish(context, self.hook.multi_publish, list(messages))
        self.log.info(
            "MPUB %s: %s messages, %s bytes", self.topic, result["messages"], result["bytes"]
        )
        return result

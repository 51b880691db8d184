"""``NSQConsumeOperator``: consume messages from a channel and apply a function to each
one (or to each batch); the consume-and-apply loop itself is
:class:`~airflow_provider_nsq.client.holding.apply.ConsumeApply`.

The operator checks its arguments when the DAG is parsed (no network, no connection
read), and when it runs: reads the connection through the hook, resolves the function,
runs the loop, counts what happened in the ``nsq.consume.*`` metrics (docs/metrics.md)
and returns a summary (or the function's results) to XCom.
"""

from __future__ import annotations

import datetime
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, BaseOperator, redact

from ..client.consumer import NSQConsumer
from ..client.holding.apply import ApplySettings, ConsumeApply, Counted, Timed
from ..client.holding.blocking_dead_letters import DeadLetterPublisher
from ..client.message import import_callable
from ..client.settings.values import Delay, delay_to_ms, duration_to_seconds
from ..hooks.nsq import NSQHook
from ..lineage import sensor_lineage
from ..links import NSQAdminChannelLink
from ..metrics import emitter, task_tags
from ..protocol.constants import DEFAULT_MAX_RDY_COUNT
from ..protocol.errors import NSQValueError
from ..protocol.names import is_ephemeral, validate_channel_name, validate_topic_name
from ..protocol.value_checks import check_bool, check_int
from ..templated import is_templated

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

_METRICS = emitter("task")
_DEFAULT_IDLE_TIMEOUT_S = 5.0

ApplyFunction = Callable[..., Any] | str


class _OperatorMetrics:
    """The loop's reports as ``nsq.consume.*`` metrics, tagged with the task's names."""

    def __init__(self, tags: Mapping[str, Any]) -> None:
        self.tags = dict(tags)

    def count(self, what: Counted, n: int) -> None:
        _METRICS.incr(f"nsq.consume.{what}", n, **self.tags)

    def time(self, what: Timed, seconds: float) -> None:
        _METRICS.timing(f"nsq.consume.{what}", seconds, **self.tags)


def _check_function(name: str, value: object) -> None:
    if not (callable(value) or (isinstance(value, str) and ("." in value or ":" in value))):
        raise NSQValueError(
            f"{name} must be a callable or a dotted path (module.function), got {value!r}"
        )


def _check_channel(channel: object) -> None:
    if is_templated(channel):
        return
    validate_channel_name(channel)
    if is_ephemeral(str(channel)):
        raise NSQValueError(
            f"channel {channel!r} is #ephemeral: nsqd deletes such a channel, and every "
            "message on it, when its last consumer disconnects, so what the task hands "
            "back (REQ) at its end would be lost; use a durable channel name"
        )


def _check_dead_letter_topic(dead_letter_topic: object, topic: object) -> None:
    if dead_letter_topic is None or is_templated(dead_letter_topic):
        return
    validate_topic_name(dead_letter_topic)
    if dead_letter_topic == topic:
        raise NSQValueError(
            f"dead_letter_topic must differ from topic ({topic!r}): dead letters would be "
            "consumed again"
        )


def _count(name: str, value: object) -> int | None:
    """None, an int >= 1, or (rendered from a template) its digits."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return check_int(value, name, minimum=1)


class NSQConsumeOperator(BaseOperator):
    """Consume up to ``max_messages`` from ``topic``/``channel`` and call a function on
    each message (``apply_function``) or on each batch (``apply_function_batch``).

    The function gets the message's record, the dict the sensor's XCom and the event
    trigger's asset events carry (``id``, ``body`` (text, or base64 when ``body_encoding
    == "base64"``; :func:`~airflow_provider_nsq.client.message.decode_record_body` gives the
    bytes), ``body_encoding``, ``attempts``, ``timestamp``, ``topic``, ``channel``,
    ``nsqd``), or a list of them; as Apache's Kafka operator does, it is called as
    ``function(*apply_function_args, record, **apply_function_kwargs)``.

    Each message is FINished after the function returned; when it raised, the message is
    REQ'd with a delay that doubles with each delivery from ``requeue_delay`` (capped at
    the connection's ``max_req_timeout_ms``); a message whose ``max_attempts``-th delivery
    failed is published to ``dead_letter_topic`` in an envelope (docs/consume.md) and
    FINished after nsqd's OK. Without ``dead_letter_topic``, such a message is REQ'd and
    the task fails, naming it: nothing is dropped silently.

    The function runs on a thread of its own while the task's thread keeps the
    connections alive: heartbeats, and a TOUCH of every held message once a third of
    msg_timeout passed, however long the function takes (up to nsqd's
    ``--max-msg-timeout``, 15 min by default, per message). Unless the connection sets
    ``msg_timeout_ms``, the task asks nsqd for a 10 s msg_timeout on its connections, as
    the triggers do: when its worker dies outright (an OOM kill, a node drained), what it
    held is back on the channel within 10 s, not nsqd's 60 s, and the task's retry (or
    any consumer) gets it (docs/operations.md, "When a worker dies").

    The task ends after ``max_messages`` deliveries were answered, or once
    ``idle_timeout`` seconds passed with nothing to do, and returns a summary to XCom: ``{"topic",
    "channel", "messages", "applied", "requeued", "dead_lettered", "nsqds", "ended"}``;
    with ``return_apply_function_results=True``, the list of the function's non-None
    results instead. If it fails or times out (``execution_timeout``), everything taken
    and not FINished is REQ'd.

    :param topic: the topic to read (templated).
    :param channel: the channel to read (templated); durable: ``#ephemeral`` is refused.
    :param apply_function: called once per message; a callable or a dotted path.
    :param apply_function_batch: called once per batch (a list of records, up to
        ``max_batch_size``); a callable or a dotted path. Exactly one of the two.
    :param apply_function_args: positional arguments put before the record (templated).
    :param apply_function_kwargs: keyword arguments (templated).
    :param max_messages: end after this many deliveries (default 1000; None: only
        ``idle_timeout`` ends the task) (templated).
    :param max_batch_size: the batch size for ``apply_function_batch`` (default 100, at
        most 2500, nsqd's ``--max-rdy-count``). The task holds up to three times as many
        in flight (at most 2500), for either function: one batch with the function, the
        next one read, the one after on its way, so nsqd delivers while the function
        runs (``apply_function``'s thread is handed every message held at once, and
        calls it on each in turn). A message waits in flight (TOUCHed) for the calls
        before it: keep ``3 x max_batch_size`` times a call's duration under nsqd's
        ``--max-msg-timeout`` (15 min by default).
    :param idle_timeout: end once this long passed with nothing to do: seconds or a
        ``timedelta`` (default 5 s) (templated).
    :param max_attempts: the delivery (nsqd's ``attempts``, counting every delivery of
        the message to any consumer) whose failure sets the message aside (default 5;
        None: REQ it every time) (templated).
    :param requeue_delay: the first REQ delay after a failure, doubling per delivery:
        ``timedelta`` or milliseconds (default 1000; 0: no delay).
    :param dead_letter_topic: where messages past ``max_attempts`` go (templated).
    :param return_apply_function_results: return the function's non-None results (each
        JSON-serialisable; a result that is not makes the task fail, its message REQ'd)
        instead of the summary.
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    """

    template_fields: Sequence[str] = (
        "topic",
        "channel",
        "apply_function_args",
        "apply_function_kwargs",
        "max_messages",
        "idle_timeout",
        "max_attempts",
        "dead_letter_topic",
        "nsq_conn_id",
    )
    ui_color = "#c6e2b3"
    operator_extra_links = (NSQAdminChannelLink(),)

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        apply_function: ApplyFunction | None = None,
        apply_function_batch: ApplyFunction | None = None,
        apply_function_args: Sequence[Any] | None = None,
        apply_function_kwargs: Mapping[str, Any] | None = None,
        max_messages: int | str | None = 1000,
        max_batch_size: int = 100,
        idle_timeout: datetime.timedelta | float | str = _DEFAULT_IDLE_TIMEOUT_S,
        max_attempts: int | str | None = 5,
        requeue_delay: Delay = 1000,
        dead_letter_topic: str | None = None,
        return_apply_function_results: bool = False,
        nsq_conn_id: str = NSQHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (apply_function is None) == (apply_function_batch is None):
            raise NSQValueError(
                "give exactly one of apply_function and apply_function_batch, got "
                f"apply_function={apply_function!r}, apply_function_batch={apply_function_batch!r}"
            )
        if apply_function is not None:
            _check_function("apply_function", apply_function)
        else:
            _check_function("apply_function_batch", apply_function_batch)
        if not is_templated(topic):
            validate_topic_name(topic)
        _check_channel(channel)
        for name, value in (("max_messages", max_messages), ("max_attempts", max_attempts)):
            if not is_templated(value):
                _count(name, value)
        if not is_templated(idle_timeout):
            duration_to_seconds(idle_timeout, "idle_timeout")
        # nsqd's --max-rdy-count: one connection holds at most that many messages.
        check_int(max_batch_size, "max_batch_size", minimum=1, maximum=DEFAULT_MAX_RDY_COUNT)
        _check_dead_letter_topic(dead_letter_topic, topic)
        check_bool(return_apply_function_results, "return_apply_function_results")
        self.topic = topic
        self.channel = channel
        self.apply_function = apply_function
        self.apply_function_batch = apply_function_batch
        self.apply_function_args = list(apply_function_args or ())
        self.apply_function_kwargs = dict(apply_function_kwargs or {})
        self.max_messages: Any = max_messages
        self.max_batch_size = max_batch_size
        self.idle_timeout: Any = idle_timeout
        self.max_attempts: Any = max_attempts
        self.requeue_delay_ms = delay_to_ms(requeue_delay, "requeue_delay")
        self.dead_letter_topic = dead_letter_topic
        self.return_apply_function_results = return_apply_function_results
        self.nsq_conn_id = nsq_conn_id

    @cached_property
    def hook(self) -> NSQHook:
        return NSQHook(nsq_conn_id=self.nsq_conn_id)

    @cached_property
    def _killed(self) -> threading.Event:
        # Made on first use, not in __init__: Airflow 3.0 deep-copies operators when a
        # DAG is tested or serialised, and an Event's lock cannot be copied.
        return threading.Event()

    def on_kill(self) -> None:
        # Called from a signal handler on the task's thread: set a flag the loop reads
        # between waits, never write to a socket the loop may be writing to.
        self._killed.set()

    def _function(self) -> Callable[[Any], Any]:
        """The function to call, with its arguments bound (the record comes last)."""
        given = (
            self.apply_function if self.apply_function is not None else self.apply_function_batch
        )
        name = "apply_function" if self.apply_function is not None else "apply_function_batch"
        function = import_callable(given, name) if isinstance(given, str) else given
        assert callable(function)
        return functools.partial(function, *self.apply_function_args, **self.apply_function_kwargs)

    def _settings(self) -> ApplySettings:
        """The rendered values, checked as literal ones are at parse time."""
        validate_topic_name(self.topic)
        _check_channel(self.channel)
        _check_dead_letter_topic(self.dead_letter_topic, self.topic)
        max_messages = _count("max_messages", self.max_messages)
        max_attempts = _count("max_attempts", self.max_attempts)
        idle_timeout = duration_to_seconds(self.idle_timeout, "idle_timeout")
        config = self.hook.get_client_config()  # the first read of the connection
        return ApplySettings(
            batch=self.apply_function_batch is not None,
            max_messages=max_messages,
            # Three batches in flight (nsqd's limit at most): one with the function, the
            # next one read, the one after on its way: nsqd never waits for the task.
            max_in_flight=min(3 * self.max_batch_size, DEFAULT_MAX_RDY_COUNT),
            batch_size=self.max_batch_size,
            idle_timeout=idle_timeout,
            max_attempts=max_attempts,
            requeue_delay_ms=min(self.requeue_delay_ms, config.max_req_timeout_ms),
            max_requeue_delay_ms=config.max_req_timeout_ms,
            keep_results=self.return_apply_function_results,
        )

    def _consumer(self) -> NSQConsumer:
        """The connection's consumer, asking nsqd for a short msg_timeout
        (:data:`~airflow_provider_nsq.hooks.base.HELD_MSG_TIMEOUT_MS`) unless
        the connection sets one: nsqd does not requeue a closed connection's messages,
        so what a killed task held waits out msg_timeout; the loop TOUCHes what it
        holds a third of the way through it, so a live task keeps its messages."""
        return NSQConsumer(self.topic, self.channel, **self.hook.held_consumer_options())

    def execute(self, context: Context) -> Any:
        settings = self._settings()
        function = self._function()
        ti = context.get("ti")
        tags = task_tags(context, topic=self.topic, channel=self.channel)
        dead_letters = None
        if self.dead_letter_topic is not None:
            dead_letters = DeadLetterPublisher(
                self.dead_letter_topic,
                self.hook.get_client_config(),
                self.hook.nsqd_tcp_addresses,
            )
        consumer = self._consumer()
        run = ConsumeApply(
            consumer,
            function,
            topic=self.topic,
            channel=self.channel,
            settings=settings,
            dead_letters=dead_letters,
            error_text=lambda exc: str(redact(str(exc))),
            by={
                "dag_id": getattr(ti, "dag_id", None),
                "task_id": getattr(ti, "task_id", None),
                "run_id": getattr(ti, "run_id", None),
            },
            metrics=_OperatorMetrics(tags),
            stopping=self._killed.is_set,
        )
        self.log.info(
            "Consuming %s/%s (max_messages=%s, max_batch_size=%s, in flight up to %s, "
            "idle_timeout=%ss, max_attempts=%s, dead_letter_topic=%s, msg_timeout=%s)",
            *(self.topic, self.channel, settings.max_messages, self.max_batch_size),
            settings.max_in_flight,
            *(settings.idle_timeout, settings.max_attempts, self.dead_letter_topic),
            f"{consumer.config.msg_timeout_ms}ms" if consumer.config.msg_timeout_ms else "nsqd's",
        )
        summary = run.run()
        result = summary.as_dict(self.topic, self.channel)
        self.log.info(
            "%s/%s: %s message(s): %s applied, %s requeued, %s dead-lettered (ended: %s)",
            *(self.topic, self.channel, result["messages"], result["applied"]),
            *(result["requeued"], result["dead_lettered"], result["ended"]),
        )
        if summary.ended == "stopped":
            raise AirflowException(
                f"The task was killed while consuming {self.topic}/{self.channel}: "
                f"{summary.applied} message(s) applied; the rest were handed back (REQ)"
            )
        return summary.results if self.return_apply_function_results else result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the topic as the input dataset (needs the ``openlineage``
        extra)."""
        return sensor_lineage(self.hook, self.topic)

"""``NSQSensor``: wait until a subscribe window on a channel yields enough messages, then
hand them to downstream tasks through XCom.

The operator takes and checks its arguments, and picks the mode; the rest lives in rooms
of its own under ``sensors/``:

- :mod:`~.window`: the check (the channel's depth from nsqd's HTTP API) and one consume
  window, which keeps what it accepted in flight;
- :mod:`~.delivery`: the ack discipline: XCom pushed by the task itself, then FIN (REQ
  if the push fails), so nothing is lost;
- :mod:`~.poke_mode` (with :mod:`~.tcp_backoff`): poke and reschedule modes without
  the HTTP API, when the next window may open;
- :mod:`~.deferrable_mode`: the wait in the triggerer, its deadline and its events;
- :mod:`~.window_settings`, :mod:`~.xcom_budget`: the window's sizes, the XCom cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowRescheduleException
from airflow.providers.common.compat.sdk import AirflowException, BaseSensorOperator, conf

from ..client.message import MessageFilter, decode_record_body, import_callable, message_record
from ..client.settings.values import Delay, delay_to_ms, is_templated
from ..hooks.nsq import NSQHook
from ..lineage import sensor_lineage
from ..links import NSQAdminChannelLink
from ..metrics import task_tags
from ..protocol.errors import NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from ..renamed_arguments import renamed_argument
from .deferrable_mode import DeferrableMode, check_deferrable_channel
from .delivery import XCOM_RETURN_KEY, HeldMessages
from .poke_mode import PokeMode
from .tcp_backoff import TCP_WINDOW_MAX_BACKOFF_S
from .window import ChannelWindow, Rejected, WindowRules
from .window_settings import (
    MAX_WINDOW_MESSAGES,
    WindowTimeout,
    check_literal_window_settings,
    check_window_settings,
    stored_window_timeout,
)
from .xcom_budget import DEFAULT_MAX_XCOM_BYTES, check_max_xcom_bytes

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

_DEFAULT_WINDOW_TIMEOUT_S = 5.0

# Re-exported for DAGs that import them from here (the docs use client.message).
__all__ = [
    "DEFAULT_MAX_XCOM_BYTES",
    "MAX_WINDOW_MESSAGES",
    "TCP_WINDOW_MAX_BACKOFF_S",
    "XCOM_RETURN_KEY",
    "MessageFilter",
    "NSQSensor",
    "decode_record_body",
    "import_callable",
    "message_record",
]


class NSQSensor(BaseSensorOperator):
    """Wait for messages on an NSQ channel and pass them downstream via XCom.

    The sensor succeeds when one subscribe window of ``window_timeout`` on
    ``topic``/``channel`` yields at least ``min_messages`` messages that ``message_filter`` accepts (a window
    takes up to ``max_messages``). Its XCom value (``return_value``) is the list of those
    messages, each a dict: ``id``, ``body`` (str; base64 text when ``body_encoding ==
    "base64"``), ``body_encoding`` (``"utf-8"`` or ``"base64"``), ``attempts``,
    ``timestamp`` (ns since the epoch, set by nsqd at publish), ``topic``, ``channel``,
    ``nsqd`` (the ``host:port`` that delivered it: a message ``id`` is unique per nsqd).

    NSQ as deployed: when the connection names nsqlookupds (``lookupd_http_addresses``)
    or several nsqds (``nsqd_tcp_addresses``), the check and the window cover every nsqd
    that has the topic: the depth is summed over the producers nsqlookupd lists (each on
    the HTTP port it announced), and one window shares ``max_messages`` across them.

    How it waits: when the connection names nsqd's HTTP API (``http_port``, or
    ``https_port`` with TLS), every check reads the channel's depth from ``/stats`` and a
    window is opened only once ``min_messages`` are ready, so waiting takes nothing and
    redelivers nothing. Without it, the window itself is the check: a short window hands
    its messages back (``REQ``, ``attempts + 1``) and the next window waits longer (see
    docs/sensors.md), in ``mode="reschedule"`` too (the pause then comes from the task
    instance's reschedule history). In deferrable mode the checks run in the triggerer.
    ``timeout`` bounds the whole wait, across deferrals and reschedules.

    What one window hands to XCom is capped at ``max_xcom_bytes`` (of JSON, as the
    metadata database stores it), before anything is FINished: over the cap the window
    keeps the messages that fit, in delivery order (at least one), and hands the rest
    back to nsqd at once (``REQ``, no delay); when even the first message does not fit
    the task fails with an error naming both sizes, and every message goes back.

    The task pushes the XCom itself and only then FINs the messages; on any failure
    before that they are REQ'd and nsqd redelivers them. Delivery is at-least-once:
    downstream tasks may see a message twice (same ``id``, higher ``attempts``).

    :param topic: the topic name (templated).
    :param channel: the channel this sensor consumes from; required. A durable name keeps
        messages between runs; a ``#ephemeral`` channel only sees messages published while
        a window is open, so it cannot be deferrable (templated).
    :param min_messages: accepted messages one window must yield to succeed (default 1)
        (templated).
    :param max_messages: most messages one window takes (default 100, at most 2500)
        (templated).
    :param window_timeout: how long one subscribe window listens: ``timedelta`` or
        seconds (default 5 s). Must be shorter than nsqd's msg_timeout (60 s by default)
        (templated: a rendered number is seconds).
    :param max_xcom_bytes: most bytes of JSON one window pushes to XCom (default 4 MiB;
        see :mod:`~airflow_provider_nsq.sensors.xcom_budget` for the databases' limits).
    :param message_filter: optional ``callable(record) -> bool`` or a dotted path to one;
        ``record`` is the dict described above. Rejected messages are handled per
        ``rejected``.
    :param rejected: what happens to messages the filter rejects: ``"finish"`` (default:
        FIN, gone from this channel; other channels keep their copies) or ``"requeue"``
        (REQ after ``rejected_requeue_delay``, so they come back to this channel).
    :param rejected_requeue_delay: REQ delay for rejected messages with
        ``rejected="requeue"``: ``timedelta`` or milliseconds (default 0).
    :param nsq_conn_id: the ``nsq`` Connection to use (templated).
    :param deferrable: wait in the triggerer between checks instead of holding a worker
        slot (default: ``[operators] default_deferrable``).
    :param window: the deprecated name of ``window_timeout`` (a warning names it).
    """

    template_fields: Sequence[str] = (
        "topic",
        "channel",
        "nsq_conn_id",
        "min_messages",
        "max_messages",
        "window_timeout",
    )
    ui_color = "#9fd5e6"
    operator_extra_links = (NSQAdminChannelLink(),)

    def __init__(
        self,
        *,
        topic: str,
        channel: str,
        min_messages: int | str = 1,
        max_messages: int | str = 100,
        window_timeout: WindowTimeout = _DEFAULT_WINDOW_TIMEOUT_S,
        max_xcom_bytes: int = DEFAULT_MAX_XCOM_BYTES,
        message_filter: MessageFilter | str | None = None,
        rejected: Rejected = "finish",
        rejected_requeue_delay: Delay = 0,
        nsq_conn_id: str = NSQHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        window: WindowTimeout | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        window_timeout = renamed_argument(
            "NSQSensor",
            ("window_timeout", window_timeout, _DEFAULT_WINDOW_TIMEOUT_S),
            ("window", window),
            "how long one consume window listens",
        )
        if not is_templated(topic):
            validate_topic_name(topic)
        if not is_templated(channel):
            validate_channel_name(channel)
        check_literal_window_settings(min_messages, max_messages, window_timeout)
        if message_filter is not None and not (
            callable(message_filter) or isinstance(message_filter, str)
        ):
            raise NSQValueError(
                f"message_filter must be a callable or a dotted path, got {message_filter!r}"
            )
        if rejected not in ("finish", "requeue"):
            raise NSQValueError(f"rejected must be 'finish' or 'requeue', got {rejected!r}")
        if deferrable and not is_templated(channel):
            check_deferrable_channel(channel)
        self.topic = topic
        self.channel = channel
        # ints and float seconds; template strings until _check_rendered() converts them
        self.min_messages: Any = min_messages
        self.max_messages: Any = max_messages
        self.window_timeout: Any = stored_window_timeout(window_timeout)
        self.max_xcom_bytes = check_max_xcom_bytes(max_xcom_bytes)
        self.message_filter = message_filter
        self.rejected: Rejected = rejected
        self.rejected_requeue_delay_ms = delay_to_ms(
            rejected_requeue_delay, "rejected_requeue_delay"
        )
        self.nsq_conn_id = nsq_conn_id
        self.deferrable = deferrable
        # Carried from a poke to execute: what the last window holds, and (no HTTP API,
        # poke and reschedule modes) when the next window may open.
        self._held: HeldMessages | None = None
        self._poke_mode: PokeMode | None = None

    @cached_property
    def hook(self) -> NSQHook:
        return NSQHook(nsq_conn_id=self.nsq_conn_id)

    def _check_rendered(self) -> None:
        """Check (and convert) what templates rendered: names, and the window's sizes
        with the errors a literal value gets when the DAG is parsed."""
        validate_topic_name(self.topic)
        validate_channel_name(self.channel)
        settings = check_window_settings(self.min_messages, self.max_messages, self.window_timeout)
        self.min_messages = settings.min_messages
        self.max_messages = settings.max_messages
        self.window_timeout = settings.window_timeout

    def _channel_window(self, context: Context) -> ChannelWindow:
        """The check and the window, with the rendered arguments."""
        rules = WindowRules(
            topic=self.topic,
            channel=self.channel,
            min_messages=self.min_messages,
            max_messages=self.max_messages,
            window_timeout=float(self.window_timeout),
            max_xcom_bytes=self.max_xcom_bytes,
            message_filter=self.message_filter,
            rejected=self.rejected,
            rejected_requeue_delay_ms=self.rejected_requeue_delay_ms,
        )
        tags = task_tags(context, topic=self.topic, channel=self.channel)
        return ChannelWindow(self.hook, rules, self.log, tags)

    def _deferrable_mode(self) -> DeferrableMode:
        return DeferrableMode(
            topic=self.topic,
            channel=self.channel,
            nsq_conn_id=self.nsq_conn_id,
            min_messages=self.min_messages,
            timeout=self.timeout,
            poke_interval=float(self.poke_interval),
            log=self.log,
        )

    # -- checks and windows -------------------------------------------------------------

    def poke(self, context: Context) -> bool:
        """One check, then a window if the check allows it. True when the window yielded
        at least ``min_messages`` accepted messages; they stay in flight (unanswered)
        until :meth:`execute` delivers them."""
        if self._poke_mode is None:
            self._poke_mode = PokeMode(
                reschedule=self.reschedule,
                poke_interval=float(self.poke_interval),
                timeout=float(self.timeout),
                log=self.log,
            )
        mode = self._poke_mode
        mode.poke_starts()
        self._check_rendered()
        window = self._channel_window(context)
        depth = window.depth()
        if depth is not None:
            if not window.enough(depth):
                return False
        elif not mode.window_due(context):
            return False  # backing off after a short window: it redelivered what it saw
        else:
            window.count_window_check()
        ok = self._hold(window)
        if depth is None:
            mode.after_window(ok, context, float(self.window_timeout))
        return ok

    def _window(self, context: Context) -> bool:
        """One window, no check first (the trigger found the messages ready)."""
        return self._hold(self._channel_window(context))

    def _hold(self, window: ChannelWindow) -> bool:
        """Open ``window``; True when it holds enough messages for :meth:`_deliver`."""
        self._held = window.open()
        return self._held is not None

    def _deliver(self, context: Context) -> None:
        """Push what the last window holds to XCom, then FIN it; REQ it if the push
        fails."""
        held, self._held = self._held, None
        if held is None:
            raise AirflowException(
                f"NSQSensor: no window holds messages of {self.topic}/{self.channel} to deliver"
            )
        held.deliver(context["ti"], self.log)

    # -- task entry points -------------------------------------------------------------

    def execute(self, context: Context) -> None:
        """Check (and window) until the channel delivers (or defer between checks), then
        deliver.

        Returns None: the XCom was pushed by :meth:`_deliver` before the FIN, so the task
        runner has nothing left to push.
        """
        self._check_no_mapped_dependants()
        self._check_rendered()
        try:
            if self.deferrable:
                check_deferrable_channel(self.channel)
                mode = self._deferrable_mode()
                deadline = mode.first_deadline()
                if not mode.unless_unreachable(lambda: self.poke(context)):
                    mode.timeout_if_past(deadline, None)
                    self.defer(**mode.deferral(deadline))
            else:
                try:
                    super().execute(context)
                except AirflowRescheduleException as exc:
                    if self._poke_mode is not None:
                        self._poke_mode.reschedule_for_next_window(exc)
                    raise
            self._deliver(context)
        finally:
            self.hook.close()

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        deadline: str | None = None,
    ) -> None:
        """Resume after the trigger fired: on ``ready``, one window; defer again if it
        comes back short. The deadline set by the first try carries over (from the
        deferral's kwargs, or from the event where ``dag.test()`` drops those)."""
        self._check_rendered()
        mode = self._deferrable_mode()
        when = mode.resumed_deadline(event or {}, deadline)
        try:
            if not mode.unless_unreachable(lambda: self._window(context)):
                mode.timeout_if_past(when, None)
                self.defer(**mode.deferral(when))
            self._deliver(context)
        finally:
            self.hook.close()

    def _check_no_mapped_dependants(self) -> None:
        if self.has_dag() and next(self.iter_mapped_dependants(), None) is not None:
            raise NSQValueError(
                "NSQSensor's output cannot be mapped over directly (.expand(...)): the task "
                "pushes its XCom before it FINs the messages. Map over a task that takes "
                "the sensor's output and returns it."
            )

    def on_kill(self) -> None:
        self.hook.close()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the topic this sensor read, as an input dataset (needs the
        ``openlineage`` extra)."""
        return sensor_lineage(self.hook, self.topic)

"""``NSQHook``: the only place that reads an Airflow Connection of type ``nsq``.

It turns the Connection into the client's settings (:func:`settings_from_connection`:
a :class:`~airflow_provider_nsq.client.connection_settings.ConnectionSettings`, read by
the settings model as every other source of settings is; for the task-side hook and the
triggers alike) and hands out the client's objects: the producer (publish, deferred
publish, batch publish), consumers (a consume window), nsqd's HTTP API (a channel's
depth) and the connection test.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.connection import (
    get_async_connection,
    get_async_extra_dejson,
)
from airflow.providers.common.compat.sdk import BaseHook

from ..client.blocking import NSQConnection
from ..client.bodies import encode_bodies, encode_body
from ..client.channel_depth import ChannelDepthReader
from ..client.config import ClientConfig
from ..client.connection_settings import ConnectionSettings
from ..client.consumer import NSQConsumer
from ..client.message import NSQMessage
from ..client.nsqd_http import ChannelDepth, NSQDHTTPClient
from ..client.producer import NSQProducer
from ..client.setting_values import Delay, Duration, delay_to_ms, duration_to_seconds
from ..client.window import AckMode
from ..protocol.commands import check_delay_ms, encode_topic
from ..protocol.errors import (
    NSQAuthError,
    NSQError,
    NSQServerError,
    NSQSettingError,
    NSQValueError,
)
from .connection_form import CONN_FIELDS, CONN_TYPE, CONNECTION_EXTRAS, UI_FIELD_BEHAVIOUR

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Connection

#: Prefix the pre-3.2 connection form (and old UIs) put in front of extra names.
_LEGACY_PREFIX = f"extra__{CONN_TYPE}__"
#: Longest wait test_connection() allows itself, whatever the connection says.
_TEST_CONNECTION_TIMEOUT_S = 10.0


class NSQConnectionConfigError(NSQValueError):
    """An ``nsq`` Airflow Connection has an unknown, missing or wrong-typed field."""


def settings_from_connection(conn: Connection, extras: Mapping[str, Any]) -> ConnectionSettings:
    """What an ``nsq`` Connection says: host, port, password (the AUTH secret) and the
    extras, read by the settings model (:class:`ConnectionSettings`) as every other
    source of settings is, the extras through
    :data:`~.connection_form.CONNECTION_EXTRAS` (the source the form is built from). Extras prefixed ``extra__nsq__`` (older forms) are read
    too; blank ones mean "not set". Errors name the field, never show the secret, and
    for an unknown extra never show its value (a secret pasted into the wrong field).

    :param conn: the Airflow Connection (host, port, password, extra).
    :param extras: the Connection's extras, already decoded from JSON.
    """
    conn_id = conn.conn_id or "<unnamed>"
    if not isinstance(extras, Mapping):
        raise NSQConnectionConfigError(f"NSQ connection {conn_id!r}: extra must be a JSON object")
    given = {str(key).removeprefix(_LEGACY_PREFIX): value for key, value in extras.items()}
    fixed: dict[str, Any] = {
        "host": (conn.host or "").strip() or "127.0.0.1",
        "auth_secret": conn.password or None,
    }
    if conn.port is not None:
        fixed["port"] = conn.port  # else the client's default, nsqd's 4150
    try:
        return ConnectionSettings.read(given, CONNECTION_EXTRAS, **fixed)
    except NSQSettingError as exc:
        what = f"extra {exc.setting!r}" if exc.setting in given else exc.setting
        raise NSQConnectionConfigError(
            f"NSQ connection {conn_id!r}: {what}: {exc.reason}"
        ) from None


class NSQHook(BaseHook):
    """Talk to NSQ through an Airflow Connection of type ``nsq``.

    Publishing calls share one connection, opened on first use and kept for the life of
    the hook (reopened transparently if nsqd closed it); each :meth:`consume` window
    uses fresh connections, because a connection can subscribe only once. Close
    everything with :meth:`close` or use the hook as a context manager.

    A process forked from one that used the hook (a Celery worker's task process, a
    multiprocessing child) opens connections of its own on first use: it never writes
    to, reads from or closes the parent's (a CLS there would end the parent's
    subscription, a PUB would take its replies).

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    conn_name_attr = "nsq_conn_id"
    default_conn_name = "nsq_default"
    conn_type = CONN_TYPE
    hook_name = "NSQ"

    def __init__(self, nsq_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nsq_conn_id = nsq_conn_id
        self._settings: ConnectionSettings | None = None
        self._publisher: NSQProducer | None = None
        self._windows: list[NSQConsumer] = []  # ack="manual" windows, closed by close()
        # Subscriptions a full window kept (RDY 0), by (topic, channel): the next window on
        # the same channel reads on them instead of connecting and subscribing again.
        self._subscriptions: dict[tuple[str, str], NSQConsumer] = {}
        self._pid = os.getpid()  # the process the connections above belong to

    def _own_connections(self) -> None:
        """In a process forked after this hook opened connections, forget them unused:
        their sockets are the parent's too. Dropped, this process's copies of them are
        closed (the parent's stay open); nothing is written to them."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._publisher = None
            self._windows, self._subscriptions = [], {}

    def __repr__(self) -> str:
        return f"<NSQHook nsq_conn_id={self.nsq_conn_id!r}>"

    # -- the connection form on Airflow < 3.2 ------------------------------------------
    # Airflow >= 3.2 builds the form from provider info (conn-fields, ui-field-behaviour)
    # and never calls these; 3.1 calls them (its API server stands in for a missing
    # wtforms); 3.0 calls them only where wtforms can be imported (the FAB provider brings
    # it), else its UI shows the generic form, the extras going in the Extra JSON field.

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extras' form fields for Airflow < 3.2, generated from the provider
        info's ``conn-fields``. Plain wtforms fields: the API server reads their label,
        description, default and allowed values (it needs no Flask-AppBuilder widgets)."""
        from wtforms import BooleanField, IntegerField, StringField
        from wtforms.validators import Optional, Regexp, any_of

        field_classes = {"boolean": BooleanField, "integer": IntegerField}
        widgets: dict[str, Any] = {}
        for name, spec in CONN_FIELDS.items():
            schema = spec["schema"]
            validators: list[Any] = [Optional()]
            if "enum" in schema:
                validators.append(any_of(schema["enum"]))
            if "pattern" in schema:
                validators.append(Regexp(schema["pattern"], message=spec["description"]))
            field_class = field_classes.get(schema["type"][0], StringField)
            widgets[name] = field_class(
                spec["label"],
                validators=validators,
                description=spec["description"],
                default=schema.get("default"),
            )
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Legacy field behaviour: the provider info's ``ui-field-behaviour``."""
        return {
            "hidden_fields": list(UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    def __enter__(self) -> NSQHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- configuration -------------------------------------------------------------

    def get_settings(self) -> ConnectionSettings:
        """All the Connection says (client settings, nsqds, nsqlookupds, HTTP API),
        read once, then cached."""
        if self._settings is None:
            conn = self.get_connection(self.nsq_conn_id)
            self._settings = settings_from_connection(conn, conn.extra_dejson)
        return self._settings

    async def aget_settings(self) -> ConnectionSettings:
        """Async :meth:`get_settings`, for triggers (no blocking call on the loop)."""
        if self._settings is None:
            # common-compat picks the call that does not block the loop on this Airflow
            # (aget_connection and aextra_dejson on 3.3.2+, a worker thread before).
            conn = await get_async_connection(self.nsq_conn_id, hook=self)
            extras = await get_async_extra_dejson(conn)
            self._settings = settings_from_connection(conn, extras)
        return self._settings

    def get_client_config(self) -> ClientConfig:
        """The client settings of this hook's Connection (read once, then cached)."""
        return self.get_settings().client

    async def aget_client_config(self) -> ClientConfig:
        """Async :meth:`get_client_config`, for triggers."""
        return (await self.aget_settings()).client

    @property
    def lookupd_http_addresses(self) -> list[str]:
        """The ``lookupd_http_addresses`` extra as a list (empty when unset)."""
        return list(self.get_settings().lookupd_http_addresses)

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """Every nsqd of the connection: ``host:port`` first, then the
        ``nsqd_tcp_addresses`` extra (duplicates dropped). Publishing fails over along
        this list; without nsqlookupd, consumers read from all of them."""
        return self.get_settings().nsqds

    @property
    def http_port(self) -> int | None:
        """The ``http_port`` extra (nsqd's HTTP API port), or None."""
        return self.get_settings().http_port

    @property
    def https_port(self) -> int | None:
        """The ``https_port`` extra (nsqd's HTTPS API port), or None."""
        return self.get_settings().https_port

    def consumer(self, topic: str, channel: str) -> NSQConsumer:
        """A blocking consumer of ``topic``/``channel`` over every nsqd of the connection
        (through nsqlookupd when it names any). The caller closes it."""
        return NSQConsumer(topic, channel, **self.consumer_options())

    def consumer_options(self) -> dict[str, Any]:
        """The keyword arguments of :class:`NSQConsumer` / :class:`AsyncNSQConsumer`
        for this connection (call :meth:`aget_settings` first in a trigger)."""
        return self.get_settings().consumer_options()

    @property
    def nsqadmin_url(self) -> str | None:
        """The ``nsqadmin_url`` extra (nsqadmin's base URL, for links), or None."""
        return self.get_settings().nsqadmin_url

    # -- nsqd's HTTP API: how many messages wait, without taking any ---------------------

    def get_http_api(self) -> NSQDHTTPClient | None:
        """nsqd's HTTP API as the connection describes it (``http_port``, or
        ``https_port`` with TLS on); None when the connection names neither.

        Call :meth:`aget_settings` first in a trigger, or let this read the connection.
        """
        return self.get_settings().http_api()

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
            then; see :mod:`~airflow_provider_nsq.client.channel_depth`).
        """
        return ChannelDepthReader(self.get_settings()).read(topic, channel)

    async def achannel_depth(self, topic: str, channel: str) -> ChannelDepth | None:
        """:meth:`channel_depth` for triggers (asyncio, no thread; producers at once):
        creates a missing durable channel the same way."""
        return await ChannelDepthReader(await self.aget_settings()).aread(topic, channel)

    # -- connections ---------------------------------------------------------------

    def get_producer(self) -> NSQProducer:
        """The publisher over :attr:`nsqd_tcp_addresses` (created on first use, then
        reused): the first nsqd that accepts a connection takes the publishes."""
        self._own_connections()
        if self._publisher is None:
            self._publisher = NSQProducer(self.nsqd_tcp_addresses, self.get_client_config())
        return self._publisher

    def get_conn(self) -> NSQConnection:
        """The publishing connection, connected (opened on first use, then reused)."""
        return self.get_producer().connection()

    def close(self) -> None:
        """Close the publishing connection and every consume window's connection.

        Messages from ``ack="manual"`` windows that were not answered are REQ'd first, so
        nsqd redelivers them at once.
        """
        self._own_connections()
        windows = [*self._windows, *self._subscriptions.values()]
        self._windows, self._subscriptions = [], {}
        for window in windows:
            window.close()
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def get_server_info(self) -> dict:
        """nsqd's IDENTIFY response (``{"response": "OK"}`` without feature negotiation)."""
        return self.get_conn().server_info

    # -- publishing ----------------------------------------------------------------

    def publish(self, topic: str, message: Any) -> dict[str, Any]:
        """PUB one message; returns after nsqd's OK.

        :param topic: the topic name.
        :param message: str (sent as UTF-8), bytes, or a dict/list (sent as compact JSON).
        :return: ``{"topic": topic, "messages": 1, "bytes": <body size>}``.
        """
        encode_topic(topic)  # a bad name is refused before connecting (a cached check)
        body = encode_body(message)
        self.get_producer().publish(topic, body)
        # No log line: a task may publish thousands of single messages in a loop, and
        # Airflow's logger costs as much as the PUB itself; the operators log per task.
        return {"topic": topic, "messages": 1, "bytes": len(body)}

    def defer_publish(self, topic: str, message: Any, delay: Delay) -> dict[str, Any]:
        """DPUB one message that nsqd delivers ``delay`` after it is published.

        :param topic: the topic name.
        :param message: str, bytes, or a JSON-serialisable dict/list.
        :param delay: ``timedelta`` or whole milliseconds, 0 to the connection's
            ``max_req_timeout_ms`` (nsqd's --max-req-timeout, 1 h by default); never clamped.
        :return: ``{"topic", "messages": 1, "bytes", "delay_ms"}``.
        """
        encode_topic(topic)
        delay_ms = delay_to_ms(delay)
        body = encode_body(message)
        config = self.get_client_config()
        check_delay_ms(delay_ms, config.max_req_timeout_ms, what="defer_publish delay")
        self.get_producer().defer_publish(topic, body, delay_ms)
        self.log.debug(
            "Published 1 deferred message (%s bytes, delay %s ms) to topic %s",
            len(body),
            delay_ms,
            topic,
        )
        return {"topic": topic, "messages": 1, "bytes": len(body), "delay_ms": delay_ms}

    def multi_publish(self, topic: str, messages: Iterable[Any]) -> dict[str, Any]:
        """MPUB a batch; returns after nsqd's OK for every frame.

        Batches bigger than nsqd's ``max_body_size`` are split into several MPUB frames;
        every body is checked before anything is sent.

        :param topic: the topic name.
        :param messages: str, bytes, or JSON-serialisable dict/list items.
        :return: ``{"topic", "messages": <count>, "bytes": <total body size>}``.
        """
        encode_topic(topic)
        if isinstance(messages, (str, bytes, bytearray, memoryview, dict)):
            raise NSQValueError(
                f"messages must be a list of messages, got a single {type(messages).__name__}"
            )
        if not isinstance(messages, Iterable):
            raise NSQValueError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        bodies = encode_bodies(messages)
        if not bodies:
            raise NSQValueError("multi_publish needs at least one message")
        total = sum(map(len, bodies))
        frames = self.get_producer().multi_publish(topic, bodies)
        # debug, not info: a task may publish many batches; the operator logs once
        self.log.debug(
            "Published %s messages (%s bytes, %s MPUB frame(s)) to topic %s",
            len(bodies),
            total,
            frames,
            topic,
        )
        return {"topic": topic, "messages": len(bodies), "bytes": total}

    # -- consuming -----------------------------------------------------------------

    def consume(
        self,
        topic: str,
        channel: str,
        *,
        max_messages: int = 1,
        ack: AckMode = "fin",
        timeout: Duration = 5.0,
        requeue_delay: Delay = 0,
    ) -> list[NSQMessage]:
        """One subscribe window over every nsqd of the connection: SUB, RDY (the
        ``max_messages`` shared between them), collect up to ``max_messages`` or until
        ``timeout`` passes, then stop delivery.

        A window that filled up keeps its subscriptions (RDY 0: nothing is delivered)
        for the next window on the channel, or until :meth:`close`.

        :param topic: the topic name.
        :param channel: the channel name (created by the SUB if it does not exist).
        :param max_messages: most messages to take (at most nsqd's max RDY count, 2500,
            per nsqd).
        :param timeout: how long the window listens: seconds or a ``timedelta``.
        :param ack: ``"fin"`` FINs the messages before returning, ``"req"`` REQs them
            (attempts + 1), ``"manual"`` returns them in flight: answer them with
            :meth:`finish` / :meth:`requeue`; :meth:`close` REQs what is left.
        :param requeue_delay: the REQ delay for ``ack="req"`` (timedelta or ms).

        The nsqds are the connection's ``host:port`` (and ``nsqd_tcp_addresses``), or
        those its nsqlookupds list for the topic (``lookupd_http_addresses``): one
        :class:`~airflow_provider_nsq.client.consumer.NSQConsumer` reads them all at
        once, answers each message on the nsqd that delivered it, and logs and skips an
        nsqd that cannot be reached.
        """
        seconds = duration_to_seconds(timeout, "timeout")
        delay_ms = delay_to_ms(requeue_delay, "requeue_delay")
        self._own_connections()
        consumer = self._subscriptions.pop((topic, channel), None) or self.consumer(topic, channel)
        try:
            messages = consumer.consume(
                max_messages=max_messages, timeout=seconds, ack=ack, requeue_delay_ms=delay_ms
            )
            nsqds = len(consumer.connections)
        except BaseException:
            consumer.close()
            raise
        if ack == "manual":
            self._windows.append(consumer)  # close() REQs what is left unanswered
        elif consumer.subscribed:
            self._subscriptions[(topic, channel)] = consumer
        else:
            consumer.close()
        # debug, not info: a task may run many windows; the sensor logs what it took
        self.log.debug(
            "Consume window on %s/%s over %s nsqd(s): %s message(s) in %gs (ack=%s)",
            *(topic, channel, nsqds, len(messages), seconds, ack),
        )
        return messages

    # Batch aliases of the messages' own finish(), requeue(delay_ms) and touch(), as
    # NSQConsumer's are (messages, then delay_ms; a timedelta is accepted too): one write
    # per nsqd, so many messages are answered as fast as one.

    def finish(self, *messages: NSQMessage) -> None:
        """``message.finish()`` for each message (from ``ack="manual"`` windows), one
        write per nsqd."""
        NSQConsumer.finish(*_messages_of("finish", messages))

    def requeue(
        self, *messages: NSQMessage, delay_ms: Delay = 0, delay: Delay | None = None
    ) -> None:
        """``message.requeue(delay_ms)`` for each message (from ``ack="manual"``
        windows; redelivered after ``delay_ms``, milliseconds or a timedelta, with
        attempts + 1), one write per nsqd. ``delay`` is the deprecated name of
        ``delay_ms``."""
        if delay is not None:
            warnings.warn(
                "NSQHook.requeue(..., delay=...) is deprecated: use delay_ms= (milliseconds "
                "or a timedelta), as NSQConsumer.requeue takes it",
                DeprecationWarning,
                stacklevel=2,
            )
            delay_ms = delay
        NSQConsumer.requeue(
            *_messages_of("requeue", messages), delay_ms=delay_to_ms(delay_ms, "requeue delay")
        )

    def touch(self, *messages: NSQMessage) -> None:
        """``message.touch()`` for each message (from ``ack="manual"`` windows: restarts
        its msg_timeout), one write per nsqd."""
        NSQConsumer.touch(*_messages_of("touch", messages))

    # -- the connection form's Test button -----------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """Connect, run the handshake (TLS, compression, AUTH), check that nsqd then
        accepts commands as it will for a task, and report nsqd's version.

        The check is a round trip nsqd refuses where a task's PUB or SUB would be refused
        on the same grounds (e.g. ``--tls-required`` with ``tls`` off): a handshake alone
        succeeds there. Never raises; never shows the AUTH secret. Bounded by the
        connection's ``connect_timeout`` and ``read_timeout`` (at most 10 s each).
        """
        secret: str | None = None
        try:
            config = self.get_client_config()
            secret = config.auth_secret
            config = config.replace(
                connect_timeout=min(config.connect_timeout, _TEST_CONNECTION_TIMEOUT_S),
                read_timeout=min(config.read_timeout, _TEST_CONNECTION_TIMEOUT_S),
            )
            with NSQConnection(config) as conn:
                try:
                    conn.ping()
                except NSQServerError as exc:
                    hint = ""
                    if "TLS required" in exc.description:
                        hint = "; nsqd requires TLS: turn on the connection's tls extra"
                    return False, _scrub(
                        f"nsqd at {config.address} completed the handshake but refuses "
                        f"commands: {exc}{hint}",
                        secret,
                    )
                info = conn.server_info
                version = info.get("version", "(version unknown: feature negotiation is off)")
                auth = conn.auth_info
                if auth is not None:
                    who = auth.get("identity") or "ok"
                    auth_text = f"ok ({who}, {auth.get('permission_count', '?')} permissions)"
                elif info.get("auth_required"):
                    auth_text = "required"
                else:
                    auth_text = "off"
                return (
                    True,
                    f"nsqd {version} at {config.address}; tls={'on' if conn.tls else 'off'}, "
                    f"auth={auth_text}, compression={conn.compression or 'none'}",
                )
        except NSQAuthError as exc:
            return False, _scrub(f"AUTH needed: {exc}", secret)
        except NSQError as exc:
            return False, _scrub(str(exc), secret)
        except Exception as exc:  # the Test button must always get an answer
            return False, _scrub(f"{type(exc).__name__}: {exc}", secret)


def _messages_of(verb: str, given: tuple[Any, ...]) -> Sequence[NSQMessage]:
    """The messages a verb was given: ``hook.finish(*messages)``, or (deprecated) one
    list of them, ``hook.finish(messages)``."""
    if len(given) == 1 and isinstance(given[0], (list, tuple)):
        warnings.warn(
            f"NSQHook.{verb}(messages) with a list is deprecated: pass the messages "
            f"themselves, NSQHook.{verb}(*messages), as NSQConsumer.{verb} takes them",
            DeprecationWarning,
            stacklevel=3,
        )
        return list(given[0])
    return given


def _scrub(text: str, secret: str | None) -> str:
    """Remove the AUTH secret from a message meant for people, whatever produced it."""
    if secret:
        text = text.replace(secret, "***")
    return text

"""``NSQHook``: the only place that reads an Airflow Connection of type ``nsq``.

It turns the Connection into a :class:`~airflow_provider_nsq.client.ClientConfig`
(:func:`client_config_from_connection`, used by the task-side hook and by the trigger
alike), owns the client connections a task opens, and offers the calls operators and
sensors make: publish, deferred publish, batch publish and one consume window.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.connection import (
    get_async_connection,
    get_async_extra_dejson,
)
from airflow.providers.common.compat.sdk import BaseHook

from ..client import ClientConfig, NSQConnection, NSQMessage, encode_body
from ..client.address import DEFAULT_NSQD_TCP_PORT, parse_address
from ..client.consumer import NSQConsumer
from ..client.lookupd import LookupdClient, Producer, parse_addresses, parse_lookupd_address
from ..client.nsqd_http import ChannelDepth, NSQDHTTPClient, combine_depths
from ..client.producer import NSQProducer, nsqd_addresses
from ..client.setting_values import parse_bool, parse_int, parse_seconds
from ..client.window import AckMode
from ..protocol.commands import check_delay_ms
from ..protocol.errors import NSQAuthError, NSQError, NSQServerError, NSQValueError
from ..protocol.names import validate_channel_name, validate_topic_name
from ..provider_info import CONN_FIELDS, CONN_TYPE, UI_FIELD_BEHAVIOUR

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Connection

#: Prefix the pre-3.2 connection form (and old UIs) put in front of extra names.
_LEGACY_PREFIX = f"extra__{CONN_TYPE}__"
#: Extras that configure the hook, not the TCP client.
_HOOK_ONLY_EXTRAS = (
    "lookupd_http_addresses",
    "nsqd_tcp_addresses",
    "http_port",
    "https_port",
    "nsqadmin_url",
)
#: Extras that list addresses (a comma-separated string or a list), and each entry's check.
_ADDRESS_LISTS = {
    "lookupd_http_addresses": parse_lookupd_address,
    "nsqd_tcp_addresses": lambda a: parse_address(a, DEFAULT_NSQD_TCP_PORT, "entry"),
}
#: Longest wait test_connection() allows itself, whatever the connection says.
_TEST_CONNECTION_TIMEOUT_S = 10.0

Delay = datetime.timedelta | int
Duration = datetime.timedelta | float


class NSQConnectionConfigError(NSQValueError):
    """An ``nsq`` Airflow Connection has an unknown, missing or wrong-typed field."""


def _bad(conn_id: str, key: str, why: str) -> NSQConnectionConfigError:
    return NSQConnectionConfigError(f"NSQ connection {conn_id!r}: extra {key!r} {why}")


_PARSERS = {"boolean": parse_bool, "integer": parse_int, "number": parse_seconds}


def _coerce_extra(conn_id: str, key: str, value: Any) -> Any:
    """One extra's value, converted to the type its conn-field declares.

    Strings are accepted for every type, because the URI form only has strings:
    ``tls=true``, ``deflate_level=6``.
    """
    schema = CONN_FIELDS[key]["schema"]
    parse = _PARSERS.get(schema["type"][0])
    if parse is not None:
        try:
            value = parse(value)
        except NSQValueError as exc:
            raise _bad(conn_id, key, str(exc)) from None
        maximum = schema.get("maximum")
        if schema["type"][0] == "number" and maximum is not None and value > maximum:
            raise _bad(conn_id, key, f"must be at most {maximum:g} seconds, got {value!r}")
        return value
    if key in _ADDRESS_LISTS:
        try:
            addresses = parse_addresses(value, key)
            for address in addresses:
                _ADDRESS_LISTS[key](address)
        except NSQValueError as exc:
            raise _bad(conn_id, key, str(exc)) from None
        return addresses
    if not isinstance(value, str):
        raise _bad(conn_id, key, f"must be a string, got {type(value).__name__}")
    pattern = schema.get("pattern")
    if pattern is not None and not re.search(pattern, value):
        # The value is not shown: a URL may carry credentials.
        raise _bad(conn_id, key, f"must match {pattern} ({CONN_FIELDS[key]['description']})")
    if "enum" in CONN_FIELDS[key]["schema"] and value not in CONN_FIELDS[key]["schema"]["enum"]:
        allowed = ", ".join(CONN_FIELDS[key]["schema"]["enum"])
        raise _bad(conn_id, key, f"must be one of {allowed}, got {value!r}")
    return value


def parse_extras(conn_id: str, extras: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a Connection's extras: known names only, each of the right type.

    Empty values (``""`` / ``None``, as the UI stores fields left blank) mean "not set".
    The error names the key; for unknown keys the value is never shown (it could be a
    secret put in the wrong place).
    """
    if not isinstance(extras, Mapping):
        raise NSQConnectionConfigError(f"NSQ connection {conn_id!r}: extra must be a JSON object")
    parsed: dict[str, Any] = {}
    for raw_key, value in extras.items():
        key = raw_key[len(_LEGACY_PREFIX) :] if raw_key.startswith(_LEGACY_PREFIX) else raw_key
        if key not in CONN_FIELDS:
            known = ", ".join(CONN_FIELDS)
            raise NSQConnectionConfigError(
                f"NSQ connection {conn_id!r}: unknown extra {raw_key!r}; known extras: {known}"
            )
        if value is None or value == "":
            continue
        parsed[key] = _coerce_extra(conn_id, key, value)
    return parsed


def client_config_from_connection(conn: Connection, extras: Mapping[str, Any]) -> ClientConfig:
    """Build the :class:`ClientConfig` for an ``nsq`` Connection.

    The single place where Connection fields become client settings, for the hook's
    blocking calls and for triggers (which read the extras without blocking their loop).
    The password is the AUTH secret; it never appears in errors or reprs.

    :param conn: the Airflow Connection (host, port, password, extra).
    :param extras: the Connection's extras, already decoded from JSON.
    """
    conn_id = conn.conn_id or "<unnamed>"
    parsed = parse_extras(conn_id, extras)
    settings = {k: v for k, v in parsed.items() if k not in _HOOK_ONLY_EXTRAS}
    if conn.port is not None:
        settings["port"] = conn.port  # else the client's default, nsqd's 4150
    try:
        return ClientConfig(
            host=(conn.host or "").strip() or "127.0.0.1",
            auth_secret=conn.password or None,
            **settings,
        )
    except NSQValueError as exc:
        # ClientConfig names the field ("ClientConfig.deflate_level=12 is invalid: ..."),
        # which is the extra's name (or host/port). auth_secret's error has no value.
        detail = str(exc).replace("ClientConfig.", "")
        raise NSQConnectionConfigError(f"NSQ connection {conn_id!r}: {detail}") from None


def delay_to_ms(delay: object, what: str = "delay") -> int:
    """A DPUB delay as whole milliseconds: an int (ms) or a ``timedelta``.

    Only the type and sign are checked here; the upper bound is the connection's
    ``max_req_timeout_ms`` (nsqd's --max-req-timeout), checked by the hook before sending.
    """
    if isinstance(delay, datetime.timedelta):
        one_ms = datetime.timedelta(milliseconds=1)
        if delay % one_ms:
            raise NSQValueError(f"{what} {delay!r} is not a whole number of milliseconds")
        ms = delay // one_ms
    elif isinstance(delay, int) and not isinstance(delay, bool):
        ms = delay
    else:
        raise NSQValueError(
            f"{what} must be a timedelta or whole milliseconds (int), got {delay!r}"
        )
    if ms < 0:
        raise NSQValueError(f"{what} must not be negative, got {ms} ms")
    return ms


def duration_to_seconds(value: object, what: str) -> float:
    """A wait as float seconds: a number of seconds or a ``timedelta``; must be > 0."""
    try:
        return parse_seconds(value)
    except NSQValueError as exc:
        raise NSQValueError(f"{what} {exc}") from None


def is_templated(value: object) -> bool:
    """True for a string Airflow will render (``{{ ... }}``): validate it after rendering."""
    return isinstance(value, str) and "{{" in value


class NSQHook(BaseHook):
    """Talk to NSQ through an Airflow Connection of type ``nsq``.

    Publishing calls share one connection, opened on first use and kept for the life of
    the hook (reopened transparently if nsqd closed it); each :meth:`consume` window
    uses fresh connections, because a connection can subscribe only once. Close
    everything with :meth:`close` or use the hook as a context manager.

    :param nsq_conn_id: the Airflow Connection id (type ``nsq``).
    """

    conn_name_attr = "nsq_conn_id"
    default_conn_name = "nsq_default"
    conn_type = CONN_TYPE
    hook_name = "NSQ"

    def __init__(self, nsq_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nsq_conn_id = nsq_conn_id
        self._config: ClientConfig | None = None
        self._extras: dict[str, Any] = {}
        self._publisher: NSQProducer | None = None
        self._windows: list[NSQConsumer] = []  # ack="manual" windows, closed by close()

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

    def get_client_config(self) -> ClientConfig:
        """The client settings of this hook's Connection (read once, then cached)."""
        if self._config is None:
            conn = self.get_connection(self.nsq_conn_id)
            extras = conn.extra_dejson
            self._config = client_config_from_connection(conn, extras)
            self._extras = parse_extras(self.nsq_conn_id, extras)
        return self._config

    async def aget_client_config(self) -> ClientConfig:
        """Async :meth:`get_client_config`, for triggers (no blocking call on the loop)."""
        if self._config is None:
            # common-compat picks the call that does not block the loop on this Airflow
            # (aget_connection and aextra_dejson on 3.3.2+, a worker thread before).
            conn = await get_async_connection(self.nsq_conn_id, hook=self)
            extras = await get_async_extra_dejson(conn)
            self._config = client_config_from_connection(conn, extras)
            self._extras = parse_extras(self.nsq_conn_id, extras)
        return self._config

    @property
    def lookupd_http_addresses(self) -> list[str]:
        """The ``lookupd_http_addresses`` extra as a list (empty when unset)."""
        self.get_client_config()
        return list(self._extras.get("lookupd_http_addresses", []))

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """Every nsqd of the connection: ``host:port`` first, then the
        ``nsqd_tcp_addresses`` extra (duplicates dropped). Publishing fails over along
        this list; without nsqlookupd, consumers read from all of them."""
        return nsqd_addresses(self.get_client_config(), self._extras.get("nsqd_tcp_addresses", []))

    @property
    def reads_topology(self) -> bool:
        """True when consumers read from several nsqds: the connection names nsqlookupds,
        or more than one nsqd."""
        return bool(self.lookupd_http_addresses) or len(self.nsqd_tcp_addresses) > 1

    def get_lookupd(self) -> LookupdClient | None:
        """The connection's nsqlookupds (bounded by its ``connect_timeout``), or None."""
        addresses = self.lookupd_http_addresses
        if not addresses:
            return None
        return LookupdClient(addresses, timeout=self.get_client_config().connect_timeout)

    def consumer(self, topic: str, channel: str) -> NSQConsumer:
        """A blocking consumer of ``topic``/``channel`` over every nsqd of the connection
        (through nsqlookupd when it names any). The caller closes it."""
        return NSQConsumer(topic, channel, **self.consumer_options())

    def consumer_options(self) -> dict[str, Any]:
        """The keyword arguments of :class:`NSQConsumer` / :class:`AsyncNSQConsumer`
        for this connection (call :meth:`aget_client_config` first in a trigger)."""
        return {
            "config": self.get_client_config(),
            "nsqd_tcp_addresses": self.nsqd_tcp_addresses,
            "lookupd_http_addresses": self.lookupd_http_addresses,
        }

    @property
    def http_port(self) -> int | None:
        """The ``http_port`` extra (nsqd's HTTP API port), or None."""
        self.get_client_config()
        return self._extras.get("http_port")

    @property
    def https_port(self) -> int | None:
        """The ``https_port`` extra (nsqd's HTTPS API port), or None."""
        self.get_client_config()
        return self._extras.get("https_port")

    @property
    def nsqadmin_url(self) -> str | None:
        """The ``nsqadmin_url`` extra (nsqadmin's base URL, for links), or None."""
        self.get_client_config()
        return self._extras.get("nsqadmin_url")

    # -- nsqd's HTTP API: how many messages wait, without taking any ---------------------

    def get_http_api(self) -> NSQDHTTPClient | None:
        """nsqd's HTTP API as the connection describes it (``http_port``, or
        ``https_port`` with TLS on); None when the connection names neither.

        Call :meth:`get_client_config` (or :meth:`aget_client_config` in a trigger) first,
        or let this read the connection.
        """
        config = self.get_client_config()
        return NSQDHTTPClient.from_config(
            config,
            http_port=self._extras.get("http_port"),
            https_port=self._extras.get("https_port"),
        )

    def channel_depth(self, topic: str, channel: str) -> ChannelDepth | None:
        """What ``channel`` holds, from nsqd's ``/stats``: no message is taken, so no
        ``attempts`` go up. Creates the channel when it is missing (as a SUB would), so
        messages published from now on wait for it. NSQError subclasses when an API
        cannot be read.

        With nsqlookupd: summed over every producer it lists, each on the HTTP port it
        announced. Without: the connection's nsqd on its ``http_port`` (None when not
        given, or when the connection lists several nsqds, whose HTTP ports are unknown).
        """
        lookupd = self.get_lookupd()
        if lookupd is not None:
            validate_channel_name(channel)
            apis = self._producer_apis(lookupd.lookup(topic))
            depths = [api.channel_depth(topic, channel, create=True) for api in apis]
            return combine_depths(topic, channel, depths)
        api = self._single_http_api()
        if api is None:
            return None
        return api.channel_depth(topic, channel, create=True)

    async def achannel_depth(self, topic: str, channel: str) -> ChannelDepth | None:
        """:meth:`channel_depth` for triggers (asyncio, no thread; producers at once)."""
        await self.aget_client_config()
        lookupd = self.get_lookupd()
        if lookupd is not None:
            validate_channel_name(channel)
            apis = self._producer_apis(await lookupd.alookup(topic))
            depths = await asyncio.gather(
                *(api.achannel_depth(topic, channel, create=True) for api in apis)
            )
            return combine_depths(topic, channel, depths)
        api = self._single_http_api()
        if api is None:
            return None
        return await api.achannel_depth(topic, channel, create=True)

    def _single_http_api(self) -> NSQDHTTPClient | None:
        if len(self.nsqd_tcp_addresses) > 1:
            return None  # the other nsqds' HTTP ports are unknown: a window is the check
        return self.get_http_api()

    def _producer_apis(self, producers: Sequence[Producer]) -> list[NSQDHTTPClient]:
        """The HTTP API of each producer, on the port it announced to nsqlookupd."""
        config = self.get_client_config()
        return [
            NSQDHTTPClient(p.broadcast_address, p.http_port, timeout=config.connect_timeout)
            for p in producers
        ]

    # -- connections ---------------------------------------------------------------

    def get_producer(self) -> NSQProducer:
        """The publisher over :attr:`nsqd_tcp_addresses` (created on first use, then
        reused): the first nsqd that accepts a connection takes the publishes."""
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
        windows, self._windows = self._windows, []
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
        validate_topic_name(topic)
        body = encode_body(message)
        self.get_producer().publish(topic, body)
        # debug, not info: a task may publish thousands of single messages in a loop
        self.log.debug("Published 1 message (%s bytes) to topic %s", len(body), topic)
        return {"topic": topic, "messages": 1, "bytes": len(body)}

    def defer_publish(self, topic: str, message: Any, delay: Delay) -> dict[str, Any]:
        """DPUB one message that nsqd delivers ``delay`` after it is published.

        :param topic: the topic name.
        :param message: str, bytes, or a JSON-serialisable dict/list.
        :param delay: ``timedelta`` or whole milliseconds, 0 to the connection's
            ``max_req_timeout_ms`` (nsqd's --max-req-timeout, 1 h by default); never clamped.
        :return: ``{"topic", "messages": 1, "bytes", "delay_ms"}``.
        """
        validate_topic_name(topic)
        delay_ms = delay_to_ms(delay)
        body = encode_body(message)
        config = self.get_client_config()
        check_delay_ms(delay_ms, config.max_req_timeout_ms, what="defer_publish delay")
        self.get_producer().defer_publish(topic, body, delay_ms)
        self.log.info(
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
        validate_topic_name(topic)
        if isinstance(messages, (str, bytes, bytearray, memoryview, dict)):
            raise NSQValueError(
                f"messages must be a list of messages, got a single {type(messages).__name__}"
            )
        if not isinstance(messages, Iterable):
            raise NSQValueError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        bodies = [encode_body(m, f"message {i}") for i, m in enumerate(messages)]
        if not bodies:
            raise NSQValueError("multi_publish needs at least one message")
        total = sum(map(len, bodies))
        frames = self.get_producer().multi_publish(topic, bodies)
        self.log.info(
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
        ``timeout`` passes, then CLS.

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
        consumer = self.consumer(topic, channel)
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
        else:
            consumer.close()
        self.log.info(
            "Consume window on %s/%s over %s nsqd(s): %s message(s) in %gs (ack=%s)",
            topic,
            channel,
            nsqds,
            len(messages),
            seconds,
            ack,
        )
        return messages

    def finish(self, messages: Sequence[NSQMessage]) -> None:
        """FIN messages (from ``ack="manual"`` windows), each on its own nsqd."""
        NSQConsumer.finish(*messages)

    def requeue(self, messages: Sequence[NSQMessage], delay: Delay = 0) -> None:
        """REQ messages (from ``ack="manual"`` windows): redelivered after ``delay``
        (timedelta or ms) with attempts + 1."""
        NSQConsumer.requeue(*messages, delay_ms=delay_to_ms(delay, "requeue delay"))

    def touch(self, messages: Sequence[NSQMessage]) -> None:
        """TOUCH messages (from ``ack="manual"`` windows): restart their msg_timeout."""
        NSQConsumer.touch(*messages)

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


def _scrub(text: str, secret: str | None) -> str:
    """Remove the AUTH secret from a message meant for people, whatever produced it."""
    if secret:
        text = text.replace(secret, "***")
    return text

"""``NSQBaseHook``: an Airflow Connection of type ``nsq``, read; the base of the
provider's hooks (:class:`~airflow_provider_nsq.hooks.nsq.NSQHook` and its roles).

The only place that reads an Airflow Connection. It turns the Connection into the
client's settings (:func:`settings_from_connection`: a
:class:`~airflow_provider_nsq.client.settings.connection_settings.ConnectionSettings`,
read by the settings model as every other source of settings is; for the task-side hooks
and the triggers alike), describes the connection form for Airflow < 3.2 (from the
provider info's, :mod:`airflow_provider_nsq.provider_info`), and answers the form's Test
button (:meth:`NSQBaseHook.test_connection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.connection import (
    get_async_connection,
    get_async_extra_dejson,
)
from airflow.providers.common.compat.sdk import BaseHook

from ..client.drivers.blocking_driver import NSQConnection
from ..client.settings.client_config import ClientConfig
from ..client.settings.connection_settings import ConnectionSettings
from ..protocol.errors import (
    NSQAuthError,
    NSQError,
    NSQServerError,
    NSQSettingError,
    NSQValueError,
)
from ..provider_info import CONN_FIELDS, CONN_TYPE, CONNECTION_EXTRAS, UI_FIELD_BEHAVIOUR

__all__ = ["NSQBaseHook", "NSQConnectionConfigError"]

if TYPE_CHECKING:
    from typing import Self

    from airflow.providers.common.compat.sdk import Connection

#: Prefix the pre-3.2 connection form (and old UIs) put in front of extra names.
_LEGACY_PREFIX = f"extra__{CONN_TYPE}__"
#: Longest wait test_connection() allows itself, whatever the connection says.
_TEST_CONNECTION_TIMEOUT_S = 10.0


#: The msg_timeout (ms) code that holds messages in a process that may die asks nsqd for
#: when the connection sets none (:meth:`NSQBaseHook.held_consumer_options`). nsqd does
#: not requeue a client's in-flight messages when its connection closes: they come back
#: when their msg_timeout expires (nsqd's ``--msg-timeout``, 60 s by default). With 10 s,
#: the held batch of a dead triggerer is back within 10 s of the kill, about when Airflow
#: (a 10 s health threshold) has moved its triggers, and a killed consume task's within
#: its retry. Not shorter: a TOUCH is due every third of it (3.3 s), leaving two thirds
#: (6.7 s) for the TOUCH to get out of a busy event loop or task before nsqd redelivers
#: (a duplicate); nsqd's own floor is 1 s. A connection that sets ``msg_timeout_ms``
#: keeps its own value (0: nsqd's ``--msg-timeout``).
HELD_MSG_TIMEOUT_MS = 10_000


class NSQConnectionConfigError(NSQValueError):
    """An ``nsq`` Airflow Connection has an unknown, missing or wrong-typed field.

    :param conn_id: the connection's id, which the message names.
    :param problem: what is wrong, naming the field (``extra 'http_prot': unknown; ...``).
    """

    def __init__(self, conn_id: str, problem: str) -> None:
        super().__init__(f"NSQ connection {conn_id!r}: {problem}")
        self.conn_id = conn_id
        self.problem = problem


def settings_from_connection(conn: Connection, extras: Mapping[str, Any]) -> ConnectionSettings:
    """What an ``nsq`` Connection says: host, port, password (the AUTH secret) and the
    extras, read by the settings model (:class:`ConnectionSettings`) as every other
    source of settings is, the extras through
    :data:`~airflow_provider_nsq.provider_info.CONNECTION_EXTRAS` (the source the form is
    built from). Extras prefixed ``extra__nsq__`` (older forms) are read too; blank ones mean "not set". Errors name the field, never show the secret, and
    for an unknown extra never show its value (a secret pasted into the wrong field).

    :param conn: the Airflow Connection (host, port, password, extra).
    :param extras: the Connection's extras, already decoded from JSON.
    """
    conn_id = conn.conn_id or "<unnamed>"
    if not isinstance(extras, Mapping):
        raise NSQConnectionConfigError(conn_id, "extra must be a JSON object")
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
        raise NSQConnectionConfigError(conn_id, f"{what}: {exc.reason}") from None


class NSQBaseHook(BaseHook):
    """An Airflow Connection of type ``nsq``: its settings, read once, its form and its
    Test button. The role hooks (publishing, consuming, nsqd's HTTP API) build on it;
    :class:`~airflow_provider_nsq.hooks.nsq.NSQHook` has them all.

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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} nsq_conn_id={self.nsq_conn_id!r}>"

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what the hook opened (nothing here: the roles that open connections
        close them)."""

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

    def consumer_options(self) -> dict[str, Any]:
        """The keyword arguments of
        :class:`~airflow_provider_nsq.client.consumer.NSQConsumer` /
        :class:`~airflow_provider_nsq.client.consumer.AsyncNSQConsumer` for this
        connection (call :meth:`aget_settings` first in a trigger)."""
        return self.get_settings().consumer_options()

    def held_consumer_options(self) -> dict[str, Any]:
        """:meth:`consumer_options` for code that holds messages while it runs, in a
        process that may die (a trigger in the triggerer, a consume task on a worker):
        msg_timeout :data:`HELD_MSG_TIMEOUT_MS` unless the connection sets one, so that
        what a dead process held is back on the channel within seconds, not after nsqd's
        60 s. The holder keeps what it holds alive with TOUCH a third of the way through
        (client/holding/holder.py)."""
        options = self.consumer_options()
        config = options["config"]
        if config.msg_timeout_ms is None:
            options["config"] = config.replace(msg_timeout_ms=HELD_MSG_TIMEOUT_MS)
        return options

    @property
    def nsqadmin_url(self) -> str | None:
        """The ``nsqadmin_url`` extra (nsqadmin's base URL, for links), or None."""
        return self.get_settings().nsqadmin_url

    # -- the connection form's Test button -----------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """Connect, run the handshake (TLS, compression, AUTH), check that nsqd then
        accepts commands as it will for a task, and report nsqd's version.

        The check is a round trip nsqd refuses where a task's PUB or SUB would be refused
        on the same grounds (e.g. ``--tls-required`` with ``tls`` off): a handshake alone
        succeeds there. Never raises; never shows the AUTH secret. Bounded by the
        connection's ``connect_timeout`` and ``read_timeout`` (at most 10 s each).

        A bad field is reported about "this connection", not by id: the form's Test
        button and ``POST /api/v2/connections/test`` (Airflow 3.0 to 3.3) build the hook
        on a copy of the connection under a random id of eight letters and digits (the
        route's ``transient_conn_id``), which the user never chose; the CLI's
        ``airflow connections test`` and a worker's queued test show the answer beside
        the id they tested.
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
        except NSQConnectionConfigError as exc:
            return False, _scrub(f"this connection: {exc.problem}", secret)
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

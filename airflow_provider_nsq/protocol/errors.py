"""One exception hierarchy for the whole provider.

Three kinds, as in h11/wsproto: the caller asked for something the protocol or the
server's limits forbid (:class:`NSQValueError`, :class:`NSQStateError`), the server
broke the protocol (:class:`NSQProtocolError`), or the server refused a command with an
error frame (:class:`NSQServerError`, carrying nsqd's code and text). Transport
failures are :class:`NSQConnectionError` / :class:`NSQTimeoutError`.
"""

from __future__ import annotations

from .constants import NON_FATAL_ERROR_CODES


class NSQError(Exception):
    """Base class of every error this provider raises."""


class NSQValueError(NSQError, ValueError):
    """A value was rejected before anything was sent (bad name, size, delay, option)."""


class NSQSettingError(NSQValueError):
    """A setting has a bad value: ``setting`` names it, ``reason`` says what was expected.

    Raised where settings are described (``client/setting_fields.py``); each place users
    write settings (a connection's extras, a Spark option) says it in its own words.
    """

    def __init__(self, setting: str, reason: str, where: str = "") -> None:
        self.setting = setting
        self.reason = reason
        self.where = where
        super().__init__(f"{where}{setting}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.setting, self.reason, self.where))


class NSQStateError(NSQError, RuntimeError):
    """A command is not allowed in the connection's current state."""


class NSQProtocolError(NSQError):
    """The peer sent bytes that are not valid NSQ (or not NSQ at all)."""


class NSQFrameTooLargeError(NSQProtocolError):
    """A frame's size prefix exceeds the configured limit."""


class NSQServerError(NSQError):
    """nsqd answered with an error frame: ``<CODE> <description>``.

    ``fatal`` is true for every code except E_FIN_FAILED, E_REQ_FAILED and
    E_TOUCH_FAILED: after a fatal error nsqd closes the connection.
    """

    def __init__(self, code: str, description: str = "") -> None:
        self.code = code
        self.description = description
        super().__init__(f"{code} {description}" if description else code)

    @property
    def fatal(self) -> bool:
        return self.code not in NON_FATAL_ERROR_CODES

    @classmethod
    def from_payload(cls, payload: bytes) -> NSQServerError:
        text = payload.decode("utf-8", "replace")
        code, _, description = text.partition(" ")
        return cls(code, description)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.code, self.description))


class NSQConnectionError(NSQError, ConnectionError):
    """The connection could not be opened, or broke, or was closed by the server."""


class NSQConnectionClosedError(NSQConnectionError):
    """The server closed the connection (EOF or reset) or the client already closed it."""


class NSQTimeoutError(NSQError, TimeoutError):
    """No answer within the configured timeout."""


class NSQTLSError(NSQConnectionError):
    """TLS was requested but could not be set up (not negotiated, or handshake failed)."""


class NSQHTTPError(NSQError):
    """nsqd's or nsqlookupd's HTTP API answered with an error status.

    ``status`` is the HTTP status, ``text`` the server's ``{"message": ...}`` (e.g.
    ``TOPIC_NOT_FOUND``), ``url`` what was asked.
    """

    def __init__(self, url: str, status: int, text: str) -> None:
        self.url = url
        self.status = status
        self.text = text
        super().__init__(f"{url} answered HTTP {status}: {text}")

    def __reduce__(self) -> tuple[type, tuple[str, int, str]]:
        return (type(self), (self.url, self.status, self.text))


class NSQAuthError(NSQError):
    """nsqd requires AUTH and no secret is configured."""


class NSQPoisonMessageError(NSQError):
    """A message failed its ``max_attempts``-th delivery and could not be set aside: no
    dead-letter topic was given, or the publish there failed. It was handed back (REQ),
    never dropped; ``message_id`` and ``nsqd`` name it, ``attempts`` is nsqd's count."""

    def __init__(self, message_id: str, nsqd: str, attempts: int, reason: str) -> None:
        self.message_id = message_id
        self.nsqd = nsqd
        self.attempts = attempts
        self.reason = reason
        super().__init__(
            f"message {message_id} from {nsqd or 'an unknown nsqd'} failed delivery "
            f"{attempts} and {reason}; it was handed back to nsqd (REQ)"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, int, str]]:
        return (type(self), (self.message_id, self.nsqd, self.attempts, self.reason))


class NSQAdminError(NSQError):
    """An administration call (create, delete, empty, pause, unpause a topic or channel)
    could not be done everywhere it was asked: an nsqd or nsqlookupd could not be
    reached or refused, or the call found what it was told must not (or must) exist.
    Raised after every other nsqd was done; ``result`` says what happened on each
    (:class:`~airflow_provider_nsq.client.http.admin_api.AdminResult`)."""

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> tuple[type, tuple[str, object]]:
        return (type(self), (str(self), self.result))

"""One map from socket, ssl and OS errors to the NSQError family (httpcore's
``map_exceptions``), for both drivers and the HTTP client: the message names the peer
and what the client was doing, never a secret. :func:`map_exceptions` wraps a block;
:func:`error_from_io` maps one caught error (a path that must not pay for a context
manager when nothing fails: the blocking connect)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Iterator

from ...protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError, NSQTLSError

__all__ = ["describe_tls_error", "error_from_io", "map_exceptions"]

# asyncio.TimeoutError is TimeoutError only from Python 3.11.
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)


@contextlib.contextmanager
def map_exceptions(
    peer: str, doing: str, timeout: float | None = None, *, tls: bool = False
) -> Iterator[None]:
    """Raise what the block raises as an :class:`NSQError` (:func:`error_from_io`)."""
    try:
        yield
    except NSQError:  # NSQConnectionError is an OSError too: pass it through untouched
        raise
    except (OSError, *_TIMEOUTS) as exc:
        raise error_from_io(exc, peer, doing, timeout, tls=tls) from None


def error_from_io(
    exc: BaseException, peer: str, doing: str, timeout: float | None = None, *, tls: bool = False
) -> NSQError:
    """The :class:`NSQError` to raise for ``exc``, a socket, ssl or OS error (or an
    asyncio timeout).

    The message reads "could not <doing> <peer>" (``peer``: ``"nsqd at host:port"`` or a
    URL); ``timeout`` is quoted when it timed out; with ``tls`` (a TLS handshake) every
    failure is an :class:`NSQTLSError`.
    """
    if isinstance(exc, NSQError):
        return exc
    if isinstance(exc, ssl.SSLError):
        return describe_tls_error(peer, exc)
    if isinstance(exc, _TIMEOUTS):
        if tls:
            return describe_tls_error(peer, exc)
        within = f" within {timeout:g}s" if timeout is not None else ""
        return NSQTimeoutError(f"could not {doing} {peer}{within}")
    if isinstance(exc, socket.gaierror):
        # A resolver error's errno is an EAI_* code, not an errno: os.strerror would say
        # "Unknown error -2". Its strerror is the resolver's own reason.
        why = exc.strerror or str(exc)
        return NSQConnectionError(
            f"could not {doing} {peer}: its host name did not resolve ({why})"
        )
    if tls:
        return describe_tls_error(peer, exc)
    # os.strerror: asyncio's own text ("Connect call failed (...)") says less.
    errno = getattr(exc, "errno", None)
    why = os.strerror(errno) if errno else str(exc)
    return NSQConnectionError(f"could not {doing} {peer}: {why}")


def describe_tls_error(peer: str, exc: BaseException) -> NSQTLSError:
    """A TLS failure in words a user can act on (a verification failure names the fix)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or str(exc)
        return NSQTLSError(
            f"TLS certificate of {peer} failed verification: {why} "
            "(set tls_ca_file to the CA that signed it)"
        )
    return NSQTLSError(f"TLS handshake with {peer} failed: {exc}")

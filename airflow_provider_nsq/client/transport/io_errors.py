"""One map from socket, ssl and OS errors to the NSQError family (httpcore's
``map_exceptions``), for both drivers and the HTTP client: the message names the peer
and what the client was doing, never a secret."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Iterator

from ...protocol.errors import NSQConnectionError, NSQError, NSQTimeoutError, NSQTLSError

# asyncio.TimeoutError is TimeoutError only from Python 3.11.
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)


@contextlib.contextmanager
def map_exceptions(
    peer: str, doing: str, timeout: float | None = None, *, tls: bool = False
) -> Iterator[None]:
    """Raise what the block raises as an :class:`NSQError`.

    The message reads "could not <doing> <peer>" (``peer``: ``"nsqd at host:port"`` or a
    URL); ``timeout`` is quoted when the block timed out; with ``tls`` (a TLS handshake)
    every failure is an :class:`NSQTLSError`.
    """
    try:
        yield
    except NSQError:  # NSQConnectionError is an OSError too: pass it through untouched
        raise
    except ssl.SSLError as exc:
        raise describe_tls_error(peer, exc) from None
    except _TIMEOUTS as exc:
        if tls:
            raise describe_tls_error(peer, exc) from None
        within = f" within {timeout:g}s" if timeout is not None else ""
        raise NSQTimeoutError(f"could not {doing} {peer}{within}") from None
    except socket.gaierror as exc:
        # A resolver error's errno is an EAI_* code, not an errno: os.strerror would say
        # "Unknown error -2". Its strerror is the resolver's own reason.
        why = exc.strerror or str(exc)
        raise NSQConnectionError(
            f"could not {doing} {peer}: its host name did not resolve ({why})"
        ) from None
    except OSError as exc:
        if tls:
            raise describe_tls_error(peer, exc) from None
        # os.strerror: asyncio's own text ("Connect call failed (...)") says less.
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise NSQConnectionError(f"could not {doing} {peer}: {why}") from None


def describe_tls_error(peer: str, exc: BaseException) -> NSQTLSError:
    """A TLS failure in words a user can act on (a verification failure names the fix)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or str(exc)
        return NSQTLSError(
            f"TLS certificate of {peer} failed verification: {why} "
            "(set tls_ca_file to the CA that signed it)"
        )
    return NSQTLSError(f"TLS handshake with {peer} failed: {exc}")

"""Building the TLS context from a ClientConfig (shared by both drivers)."""

from __future__ import annotations

import os
import ssl

from ...protocol.errors import NSQTLSError, NSQValueError
from ..settings.client_config import ClientConfig

__all__ = ["build_ssl_context"]


def build_ssl_context(config: ClientConfig) -> ssl.SSLContext:
    """A client context: verification on unless ``tls_verify`` is false; optional CA
    file and client certificate. Errors name the setting, never a file's contents."""
    for name in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
        path = getattr(config, name)
        if path is not None and not os.path.isfile(path):
            raise NSQValueError(f"{name}: no such file {path!r}")
    try:
        context = ssl.create_default_context(cafile=config.tls_ca_file)
    except ssl.SSLError as exc:
        raise NSQTLSError(
            f"tls_ca_file {config.tls_ca_file!r} is not a valid CA bundle: {exc.reason}"
        ) from None
    if not config.tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.tls_cert_file:
        try:
            context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        except ssl.SSLError as exc:
            raise NSQTLSError(
                f"tls_cert_file/tls_key_file could not be loaded: {exc.reason}"
            ) from None
    return context

"""Throw-away TLS material for tests: a CA, a server certificate, a client certificate.

Made with ``trustme`` (the ``test`` extra; the python-trio project's certificates for
tests). Never use these in production: the keys are written unencrypted to the
directory you give.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TLSFiles", "generate_tls_files"]

_HOST_NAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)


@dataclass(frozen=True)
class TLSFiles:
    """Paths of the generated PEM files."""

    ca_file: str
    ca_key: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    client_common_name: str


def generate_tls_files(
    directory: str | Path,
    host: str = "127.0.0.1",
    client_common_name: str = "nsq-test-client",
    days: int = 30,
) -> TLSFiles:
    """Write a CA, a server cert for ``host`` (and ``localhost``) and a client cert
    whose common name is ``client_common_name`` (what nsqd hands its AUTH server), all
    signed by the CA, into ``directory``; return their paths. Keys are readable by the
    owner only.

    The client certificate names ``client_common_name`` in its subjectAltName too: an
    empty one fails Python 3.13's default (strict) verification, so it must be a host
    name (letters, digits, ``-`` and ``.``).
    """
    if not _HOST_NAME.fullmatch(client_common_name):
        raise ValueError(
            f"client_common_name must be a host name (letters, digits, '-' and '.'), "
            f"it is also the client certificate's subjectAltName: {client_common_name!r}"
        )
    import trustme

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)
    ca = trustme.CA(organization_name="airflow-provider-nsq test CA")
    server = ca.issue_cert(host, "localhost", common_name=host, not_before=now, not_after=until)
    client = ca.issue_cert(
        client_common_name, common_name=client_common_name, not_before=now, not_after=until
    )
    paths = TLSFiles(
        ca_file=str(out / "ca.pem"),
        ca_key=str(out / "ca-key.pem"),
        server_cert=str(out / "server.pem"),
        server_key=str(out / "server-key.pem"),
        client_cert=str(out / "client.pem"),
        client_key=str(out / "client-key.pem"),
        client_common_name=client_common_name,
    )
    ca.cert_pem.write_to_path(paths.ca_file)
    ca.private_key_pem.write_to_path(paths.ca_key)
    server.cert_chain_pems[0].write_to_path(paths.server_cert)
    server.private_key_pem.write_to_path(paths.server_key)
    client.cert_chain_pems[0].write_to_path(paths.client_cert)
    client.private_key_pem.write_to_path(paths.client_key)
    for key in (paths.ca_key, paths.server_key, paths.client_key):
        Path(key).chmod(0o600)
    return paths

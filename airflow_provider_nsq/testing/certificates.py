"""Throw-away TLS material for tests: a CA, a server certificate, a client certificate.

Uses the ``cryptography`` package (installed with Airflow). Never use these in
production: the keys are written unencrypted to the directory you give.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TLSFiles", "generate_tls_files"]


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
    """Write a CA, a server cert for ``host`` (CN and SAN) and a client cert, all
    signed by the CA, into ``directory``; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(path: Path, k: ec.EllipticCurvePrivateKey) -> None:
        path.write_bytes(
            k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)

    ca_key = key()
    ca_name = name("airflow-provider-nsq test CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName] | None):
        k = key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_name)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), k

    try:
        host_name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        host_name = x509.DNSName(host)
    server_cert, server_key = leaf(
        host, ExtendedKeyUsageOID.SERVER_AUTH, [host_name, x509.DNSName("localhost")]
    )
    client_cert, client_key = leaf(client_common_name, ExtendedKeyUsageOID.CLIENT_AUTH, None)

    pem = serialization.Encoding.PEM
    paths = TLSFiles(
        ca_file=str(out / "ca.pem"),
        ca_key=str(out / "ca-key.pem"),
        server_cert=str(out / "server.pem"),
        server_key=str(out / "server-key.pem"),
        client_cert=str(out / "client.pem"),
        client_key=str(out / "client-key.pem"),
        client_common_name=client_common_name,
    )
    Path(paths.ca_file).write_bytes(ca_cert.public_bytes(pem))
    write_key(Path(paths.ca_key), ca_key)
    Path(paths.server_cert).write_bytes(server_cert.public_bytes(pem))
    write_key(Path(paths.server_key), server_key)
    Path(paths.client_cert).write_bytes(client_cert.public_bytes(pem))
    write_key(Path(paths.client_key), client_key)
    return paths

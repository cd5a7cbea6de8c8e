"""Throw-away PKI for the TLS registry tests.

The harness needs a CA that tests can trust explicitly (so we exercise real certificate
verification, not ``verify=False``), a server certificate valid for every loopback name a
client may use, and a second, unrelated CA so tests can prove that a wrong trust anchor is
rejected.  ECDSA P-256 keys keep generation instantaneous.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateAuthority",
    "Pki",
    "create_ca",
    "issue_client_cert",
    "make_ca",
    "make_pki",
]

_VALIDITY = dt.timedelta(days=30)
# Back-date certificates a little so a slightly skewed clock never makes them "not yet valid".
_BACKDATE = dt.timedelta(hours=1)


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA certificate + key on disk, plus the loaded objects for signing."""

    cert_path: Path
    key_path: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Pki:
    """PEM files of the test PKI.

    ``ca_cert`` signed ``server_cert``; ``other_ca_cert`` is an unrelated CA that must *not*
    validate the server (for "untrusted CA" tests).
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    other_ca_cert: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def create_ca(directory: Path, name: str) -> CertificateAuthority:
    """Create a self-signed CA (``CA:TRUE``) named ``name`` and write ``<name>.crt/.key``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "airgap tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    now = dt.datetime.now(dt.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
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
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    _write_cert(cert, cert_path)
    _write_key(key, key_path)
    return CertificateAuthority(cert_path=cert_path, key_path=key_path, cert=cert, key=key)


def make_ca(directory: Path, name: str) -> Path:
    """Create a standalone CA and return the path of its PEM certificate."""
    return create_ca(directory, name).cert_path


def issue_server_cert(
    ca: CertificateAuthority,
    directory: Path,
    name: str = "server",
    *,
    dns_names: tuple[str, ...] = ("localhost",),
    ip_addresses: tuple[str, ...] = ("127.0.0.1", "::1"),
) -> tuple[Path, Path]:
    """Issue a TLS server certificate signed by ``ca``; returns ``(cert, key)`` paths.

    Go (the registry) ignores the CN and requires SubjectAltNames, so every loopback name
    a client might dial is listed there.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "airgap tests"),
                    x509.NameAttribute(NameOID.COMMON_NAME, ip_addresses[0]),
                ]
            )
        )
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    _write_cert(cert, cert_path)
    _write_key(key, key_path)
    return cert_path, key_path


def issue_client_cert(
    ca: CertificateAuthority, directory: Path, name: str = "client"
) -> tuple[Path, Path]:
    """Issue a TLS client certificate (extended key usage clientAuth) signed by ``ca``,
    for registries that require one (``http.tls.clientcas``); returns ``(cert, key)``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"airgap {name}")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    cert_path = directory / f"{name}.cert"
    key_path = directory / f"{name}.key"
    _write_cert(cert, cert_path)
    _write_key(key, key_path)
    return cert_path, key_path


def make_pki(directory: Path) -> Pki:
    """Create the full test PKI (CA, loopback server cert, unrelated second CA) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = create_ca(directory, "test-ca")
    server_cert, server_key = issue_server_cert(ca, directory)
    other = create_ca(directory, "untrusted-ca")
    return Pki(
        directory=directory,
        ca_cert=ca.cert_path,
        ca_key=ca.key_path,
        server_cert=server_cert,
        server_key=server_key,
        other_ca_cert=other.cert_path,
    )

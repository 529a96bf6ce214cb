"""TLS for the OpenAI endpoint: ModelDeck's own self-signed certificate, or the user's, checked before use.

A LAN bind sends the API key with every request, so it is served over TLS. With no certificate of the user's,
ModelDeck makes one on first use (ECDSA P-256, kept in <config>/tls, key file 0600) naming every host the endpoint
answers to, and reuses it while it still names them and stays valid, so its fingerprint is stable: clients trust
that one file. A new one is made, and the reason said, only when the names or the dates no longer fit.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engines.atomic_files import write_atomically

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALID_DAYS = 825  # the longest that platforms accept for a TLS server certificate a user trusts by hand
RENEW_BEFORE_DAYS = 30
TLS_MODES = ("auto", "on", "off")
_Names = tuple[str, ...]


class TlsError(Exception):
    """The TLS certificate or key cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class TlsIdentity:
    """The certificate the endpoint presents. `own`: made by ModelDeck (self-signed); `note` says what changed."""

    cert_path: Path
    key_path: Path
    fingerprint: str  # SHA-256 of the certificate, as AB:CD:..., as browsers and `openssl x509 -fingerprint` show
    own: bool
    not_after: datetime.datetime
    note: str = ""

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        try:
            context.load_cert_chain(self.cert_path, self.key_path)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"Cannot use the TLS certificate {self.cert_path} with {self.key_path}: {exc}") from exc
        return context

    def describe(self) -> dict[str, str | bool]:
        """As the control API and the GUI show it."""
        return {"fingerprint_sha256": self.fingerprint, "cert_path": str(self.cert_path), "self_signed": self.own}


def fingerprint(certificate: x509.Certificate) -> str:
    return certificate.fingerprint(hashes.SHA256()).hex(":").upper()


def host_names(hosts: Iterable[str]) -> _Names:
    """The names a certificate must carry for these Host header values (brackets of IPv6 addresses dropped)."""
    return tuple(sorted({host.strip("[]").lower() for host in hosts}))


def own_certificate(directory: Path, hosts: Iterable[str], now: datetime.datetime | None = None) -> TlsIdentity:
    """ModelDeck's certificate in `directory` when it names every host and is valid for a while yet; otherwise
    a new one, with a note saying why the fingerprint changed."""
    names = host_names(hosts)
    now = now or datetime.datetime.now(datetime.UTC)
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    why_new = ""  # first use
    if cert_path.exists() or key_path.exists():
        try:
            identity = _load(cert_path, key_path, own=True)
            why_new = _unfit(cert_path, names, now)
            if not why_new:
                if key_path.stat().st_mode & 0o077:
                    key_path.chmod(0o600)  # loosened by hand since: the key is this user's alone
                return identity
        except TlsError as exc:
            why_new = f"the one kept there could not be used ({exc})"
    _make(cert_path, key_path, names, now)
    identity = _load(cert_path, key_path, own=True)
    if not why_new:
        return identity  # first use: the serve banner says that ModelDeck made it, and where it is
    return replace(identity, note=f"a new self-signed certificate, as {why_new}: clients must trust the new one")


def user_certificate(cert_path: Path, key_path: Path, now: datetime.datetime | None = None) -> TlsIdentity:
    """The user's certificate and key, checked: readable, PEM, unencrypted key, the key belonging to the
    certificate. An expired certificate is used, with a note (clients will refuse it)."""
    identity = _load(cert_path.expanduser(), key_path.expanduser(), own=False)
    if identity.not_after < (now or datetime.datetime.now(datetime.UTC)):
        expired = f"{identity.not_after:%Y-%m-%d}"
        return replace(identity, note=f"the TLS certificate {cert_path} expired on {expired}: clients will refuse it")
    return identity


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TlsError(f"The TLS {what} {path} does not exist.") from None
    except IsADirectoryError:
        raise TlsError(f"The TLS {what} {path} is a folder, not a file.") from None
    except OSError as exc:
        raise TlsError(f"Cannot read the TLS {what} {path}: {exc.strerror or exc}.") from None


def _load(cert_path: Path, key_path: Path, own: bool) -> TlsIdentity:
    cert_data, key_data = _read(cert_path, "certificate"), _read(key_path, "key")
    try:
        certificate = x509.load_pem_x509_certificates(cert_data)[0]  # the server's own first, then any chain
    except ValueError:
        raise TlsError(f"The TLS certificate {cert_path} is not a PEM certificate (BEGIN CERTIFICATE).") from None
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        raise TlsError(f"The TLS key {key_path} is encrypted: give ModelDeck an unencrypted key (mode 0600).") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsError(f"The TLS key {key_path} is not a PEM private key (BEGIN ... PRIVATE KEY).") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, public) != certificate.public_key().public_bytes(encoding, public):
        raise TlsError(f"The TLS key {key_path} does not belong to the certificate {cert_path}: they are not a pair.")
    return TlsIdentity(cert_path, key_path, fingerprint(certificate), own, certificate.not_valid_after_utc)


def _unfit(cert_path: Path, names: _Names, now: datetime.datetime) -> str:
    """Why the kept certificate cannot serve `names` now; empty when it can."""
    certificate = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
    if certificate.not_valid_after_utc - now < datetime.timedelta(days=RENEW_BEFORE_DAYS):
        return f"the previous one expires on {certificate.not_valid_after_utc:%Y-%m-%d}"
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the previous one names no host"
    held = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    held |= {name.lower() for name in san.get_values_for_type(x509.DNSName)}
    missing = [name for name in names if name not in held]
    return f"the previous one did not name {', '.join(missing)}" if missing else ""


def _make(cert_path: Path, key_path: Path, names: _Names, now: datetime.datetime) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ModelDeck endpoint")])
    alt_names: list[x509.GeneralName] = []
    for name in names:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    public = key.public_key()
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
    )  # fmt: skip
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks of other machines may lag a little
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Each created with its mode (a key never briefly readable by others); the key first: a certificate without
    # its key is never left alone
    write_atomically(key_path, key_bytes)
    write_atomically(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)


def endpoint_identity(
    mode: str, loopback: bool, hosts: Iterable[str], directory: Path, cert: Path | None, key: Path | None
) -> TlsIdentity | None:
    """The certificate the endpoint serves, or None for plain HTTP. `mode` "auto": TLS beyond loopback only;
    "on": always; "off": never. The user's `cert` and `key` go together and mean TLS."""
    if mode not in TLS_MODES:
        raise TlsError(f"--tls must be one of {', '.join(TLS_MODES)}, got {mode!r}.")
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise TlsError("--tls-cert and --tls-key go together: give both, or neither for ModelDeck's own.")
        if mode == "off":
            raise TlsError("--tls off and --tls-cert/--tls-key contradict each other: drop one.")
        return user_certificate(cert, key)
    if mode == "off" or (mode == "auto" and loopback):
        return None
    return own_certificate(directory, hosts)

"""The endpoint's certificate (app.service.http.tls) on real files: made on first use with a private key, reused with a
stable fingerprint, made anew only when it no longer fits (and said why), and the user's own pair checked."""

from __future__ import annotations

import datetime
import hashlib
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from app.service.http.tls import (
    CERT_FILE,
    KEY_FILE,
    TlsError,
    endpoint_identity,
    host_names,
    own_certificate,
    user_certificate,
)

HOSTS = ("127.0.0.1", "localhost", "[::1]", "0.0.0.0", "192.0.2.7", "Box.local")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _alt_names(cert_path: Path) -> set[str]:
    certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} | set(san.get_values_for_type(x509.DNSName))


def test_first_use_makes_a_certificate_naming_every_host_with_a_private_key(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    identity = own_certificate(directory, HOSTS)
    assert identity.own and identity.cert_path == directory / CERT_FILE and identity.key_path == directory / KEY_FILE
    assert _mode(identity.key_path) == 0o600 and _mode(directory) == 0o700
    assert _alt_names(identity.cert_path) == {"127.0.0.1", "localhost", "::1", "0.0.0.0", "192.0.2.7", "box.local"}
    assert identity.note == ""  # nothing to warn of: the banner says ModelDeck made it
    assert not list(directory.glob(".*.tmp")), "a temporary file was left behind"
    # The fingerprint is that of the certificate in the file, as `openssl x509 -fingerprint -sha256` shows it.
    der = ssl.PEM_cert_to_DER_cert(identity.cert_path.read_text())
    assert identity.fingerprint == ":".join(f"{byte:02X}" for byte in hashlib.sha256(der).digest())
    # Python's own TLS client verifies it by that file, name included, as a client of the endpoint will.
    client = ssl.create_default_context(cafile=str(identity.cert_path))
    assert client.verify_mode == ssl.CERT_REQUIRED
    identity.server_context()  # OpenSSL takes the pair


def test_the_certificate_is_reused_while_it_fits(tmp_path: Path) -> None:
    first = own_certificate(tmp_path, HOSTS)
    again = own_certificate(tmp_path, ["localhost", "127.0.0.1"])  # fewer names: still fits
    assert again.fingerprint == first.fingerprint and again.note == ""
    first.key_path.chmod(0o644)
    assert own_certificate(tmp_path, HOSTS).fingerprint == first.fingerprint
    assert _mode(first.key_path) == 0o600, "a key loosened by hand is made private again"


def test_a_new_name_or_a_near_end_makes_a_new_one_and_says_why(tmp_path: Path) -> None:
    first = own_certificate(tmp_path, HOSTS)
    moved = own_certificate(tmp_path, [*HOSTS, "198.51.100.9"])
    assert moved.fingerprint != first.fingerprint
    assert "did not name 198.51.100.9" in moved.note and "trust the new one" in moved.note
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=810)
    renewed = own_certificate(tmp_path, HOSTS, now=later)
    assert renewed.fingerprint != moved.fingerprint and "expires on" in renewed.note


def test_a_damaged_kept_certificate_is_replaced(tmp_path: Path) -> None:
    first = own_certificate(tmp_path, HOSTS)
    first.cert_path.write_text("not a certificate\n")
    replaced = own_certificate(tmp_path, HOSTS)
    assert replaced.fingerprint != first.fingerprint and "could not be used" in replaced.note


def test_host_names_drop_brackets_and_case() -> None:
    assert host_names(["[::1]", "Box.Local", "127.0.0.1", "box.local"]) == ("127.0.0.1", "::1", "box.local")


# The user's own certificate -------------------------------------------------------------------------------


def _pair(directory: Path) -> tuple[Path, Path]:
    identity = own_certificate(directory, ["localhost"])
    return identity.cert_path, identity.key_path


def test_the_users_pair_is_used_as_given(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path / "mine")
    identity = user_certificate(cert, key)
    assert not identity.own and identity.cert_path == cert and identity.note == ""
    assert identity.describe() == {"fingerprint_sha256": identity.fingerprint, "cert_path": str(cert),
                                   "self_signed": False}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing certificate", "certificate {cert} does not exist"),
        ("missing key", "key {key} does not exist"),
        ("certificate is a folder", "certificate {cert} is a folder"),
        ("certificate not PEM", "certificate {cert} is not a PEM certificate"),
        ("key not PEM", "key {key} is not a PEM private key"),
        ("encrypted key", "key {key} is encrypted"),
        ("not a pair", "key {key} does not belong to the certificate {cert}"),
    ],
)
def test_a_bad_user_pair_is_a_clear_error(tmp_path: Path, case: str, expected: str) -> None:
    cert, key = _pair(tmp_path / "mine")
    other_cert, other_key = _pair(tmp_path / "other")
    if case == "missing certificate":
        cert = tmp_path / "nowhere.pem"
    elif case == "missing key":
        key = tmp_path / "nowhere-key.pem"
    elif case == "certificate is a folder":
        cert = tmp_path / "mine"
    elif case == "certificate not PEM":
        cert.write_bytes(b"\x00\x01 binary")
    elif case == "key not PEM":
        key.write_text("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n")
    elif case == "encrypted key":
        loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        key.write_bytes(loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.BestAvailableEncryption(b"secret")))  # fmt: skip
    else:
        key = other_key
    before = {path: path.read_bytes() for path in (other_cert, other_key) if path.exists()}
    with pytest.raises(TlsError) as refused:
        user_certificate(cert, key)
    assert expected.format(cert=cert, key=key) in str(refused.value)
    assert {path: path.read_bytes() for path in before} == before, "the user's files were changed"


def test_an_expired_user_certificate_is_used_with_a_note(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path / "mine")
    identity = user_certificate(cert, key, now=datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=900))
    assert "expired on" in identity.note


# Which certificate, if any -------------------------------------------------------------------------------


def test_loopback_stays_plain_unless_asked(tmp_path: Path) -> None:
    assert endpoint_identity("auto", True, HOSTS, tmp_path / "tls", None, None) is None
    assert not (tmp_path / "tls").exists(), "no certificate is made for plain HTTP"
    assert endpoint_identity("off", False, HOSTS, tmp_path / "tls", None, None) is None
    on = endpoint_identity("on", True, HOSTS, tmp_path / "tls", None, None)
    lan = endpoint_identity("auto", False, HOSTS, tmp_path / "tls", None, None)
    assert on is not None and lan is not None and on.own and lan.fingerprint == on.fingerprint


def test_user_files_go_together_and_mean_tls(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path / "mine")
    mine = endpoint_identity("auto", True, HOSTS, tmp_path / "tls", cert, key)
    assert mine is not None and not mine.own
    with pytest.raises(TlsError, match="go together"):
        endpoint_identity("auto", False, HOSTS, tmp_path / "tls", cert, None)
    with pytest.raises(TlsError, match="contradict"):
        endpoint_identity("off", False, HOSTS, tmp_path / "tls", cert, key)
    with pytest.raises(TlsError, match="must be one of"):
        endpoint_identity("maybe", False, HOSTS, tmp_path / "tls", None, None)
    assert not (tmp_path / "tls").exists()

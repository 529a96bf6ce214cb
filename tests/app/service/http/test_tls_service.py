"""HTTPS on the OpenAI endpoint, against the real service (`python -m app serve`) and the bundled model: a LAN bind
serves TLS by default on both HTTP servers, the official client that trusts the certificate streams a chat, a
client that does not is refused, plain HTTP to the port ends cleanly, the certificate survives restarts, and a bad
certificate/key pair stops the service before it listens. All traffic stays on loopback (the LAN bind is 0.0.0.0)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from app.bench.load import LoadSpec, run_level
from app.client import stream_chat
from app.gui.run.snippets_panel import snippets
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.http.tls import own_certificate
from tests.support.service import REPO, RunningService, free_port, start_service_process, stop_service_process


def _port(service: RunningService) -> int:
    return int(service.url.rsplit(":", 1)[1].split("/")[0])


def _trusting(cert_path: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cert_path)


def _served_fingerprint(port: int) -> str:
    """The SHA-256 fingerprint of the certificate the port actually presents (not verified: only looked at)."""
    der = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port), timeout=10))
    return ":".join(f"{byte:02X}" for byte in hashlib.sha256(der).digest())


def _plain_http_gets_no_answer(port: int) -> bytes:
    """What a plain-HTTP request to the TLS port gets back before the server ends the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return received


def _status() -> str:
    result = subprocess.run([sys.executable, "-m", "app", "status"], capture_output=True, text=True, timeout=60,
                            cwd=REPO, check=True)  # fmt: skip
    return result.stdout


@pytest.mark.parametrize("server", ["own", "uvicorn"])
def test_a_lan_bind_streams_a_chat_over_tls_to_a_client_that_trusts_the_certificate(
    paths: AppPaths, tmp_path: Path, server: str
) -> None:
    running = start_service_process(
        paths, tmp_path, "--host", "0.0.0.0", "--gateway-server", server, "--model", BUNDLED_ID
    )
    try:
        port = _port(running)
        endpoint = running.client.endpoint()
        tls = endpoint["tls"]
        assert endpoint["url"] == f"https://0.0.0.0:{port}/v1"
        assert tls["self_signed"] is True and tls["cert_path"] == str(paths.tls_dir / "cert.pem")
        assert _served_fingerprint(port) == tls["fingerprint_sha256"]
        url = f"https://127.0.0.1:{port}/v1"
        with (
            httpx.Client(verify=_trusting(tls["cert_path"]), trust_env=False) as http,
            openai.OpenAI(base_url=url, api_key=running.api_key, http_client=http, max_retries=0) as client,
        ):
            stream = client.chat.completions.create(
                model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, stream=True
            )
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
            assert text.strip()
            with pytest.raises(openai.AuthenticationError):  # TLS does not replace the key
                client.with_options(api_key="wrong").models.list()

            # A client that does not trust the certificate is refused by its own TLS check.
            with (
                openai.OpenAI(base_url=url, api_key=running.api_key, max_retries=0, timeout=10) as untrusting,
                pytest.raises(openai.APIConnectionError),
            ):
                untrusting.models.list()
            # Plain HTTP to the TLS port: the connection ends without an answer (nothing in clear), and the
            # service goes on serving TLS.
            assert _plain_http_gets_no_answer(port) == b""
            with httpx.Client(trust_env=False, timeout=10) as plain, pytest.raises(httpx.TransportError):
                plain.get(f"http://127.0.0.1:{port}/v1/models")
            assert BUNDLED_ID in [model.id for model in client.models.list()]

        # The GUI's chat and "Test it" go through app.client with the endpoint as the control API describes it.
        assert "".join(stream_chat(endpoint, BUNDLED_ID, [{"role": "user", "content": "Hi"}], 8)).strip()
        # So does the benchmark's load generator (modeldeck bench, the Benchmark page).
        spec = LoadSpec(endpoint["url"], running.api_key, BUNDLED_ID, 1, 1, 4, lambda _index: "Hi", tls["cert_path"])
        results, _ = asyncio.run(run_level(spec))
        assert results[0].error is None and results[0].ttft_s is not None, results[0].error
    finally:
        stop_service_process(running)
    assert running.process.returncode == 0
    log = running.output()
    assert tls["fingerprint_sha256"] in log, "the serve banner shows the fingerprint"
    assert "Traceback" not in log and " ERROR " not in log, log


def test_the_snippets_run_as_shown_over_tls(paths: AppPaths, tmp_path: Path) -> None:
    """The code the snippets panel shows for a TLS endpoint, run as it is: Python (the official client), curl, and
    Node where it is installed (it is on the machines this was written on; elsewhere that part does not run)."""
    running = start_service_process(paths, tmp_path, "--host", "0.0.0.0", "--model", BUNDLED_ID)
    try:
        endpoint = running.client.endpoint()
        code = snippets(endpoint["url"], BUNDLED_ID, endpoint["tls"])
        env = {**os.environ, "MODELDECK_API_KEY": running.api_key}
        runs = {"Python": [sys.executable, "-c", code["Python"]], "curl": ["bash", "-c", code["curl"]]}
        if shutil.which("node"):
            runs["JavaScript"] = ["node", "--input-type=module", "-e", code["JavaScript"]]
            env["NODE_EXTRA_CA_CERTS"] = endpoint["tls"]["cert_path"]  # as the snippet's comment says
        for language, command in runs.items():
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0 and done.stdout.strip(), (language, done.stderr)
            if language == "curl":
                assert json.loads(done.stdout)["choices"][0]["message"]["content"]
    finally:
        stop_service_process(running)


def test_the_certificate_survives_restarts_and_loopback_stays_plain(paths: AppPaths, tmp_path: Path) -> None:
    fingerprints = []
    for args in (("--host", "0.0.0.0"), ("--host", "0.0.0.0"), ("--tls", "on")):
        running = start_service_process(paths, tmp_path, *args)
        try:
            tls = running.client.endpoint()["tls"]
            fingerprints.append(tls["fingerprint_sha256"])
            assert _served_fingerprint(_port(running)) == tls["fingerprint_sha256"]
            if args == ("--tls", "on"):  # TLS on loopback too, when asked; `modeldeck status` shows it
                status = _status()
                assert f"https://127.0.0.1:{_port(running)}/v1" in status
                assert f"SHA-256 {tls['fingerprint_sha256']}" in status and tls["cert_path"] in status
        finally:
            stop_service_process(running)
    assert len(set(fingerprints)) == 1, f"the fingerprint changed across restarts: {fingerprints}"
    assert stat.S_IMODE((paths.tls_dir / "key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.tls_dir.stat().st_mode) == 0o700

    running = start_service_process(paths, tmp_path)  # loopback, by default
    try:
        endpoint = running.client.endpoint()
        assert endpoint["url"].startswith("http://127.0.0.1:") and endpoint["tls"] is None
        assert "TLS          off: plain HTTP" in _status()
        assert running.openai_client().models.list()
    finally:
        stop_service_process(running)


def test_tls_off_on_a_lan_bind_serves_plain_http_with_a_warning(paths: AppPaths, tmp_path: Path) -> None:
    """For a LAN bind behind a proxy that does TLS: allowed, and said in the log."""
    running = start_service_process(paths, tmp_path, "--host", "0.0.0.0", "--tls", "off")
    try:
        endpoint = running.client.endpoint()
        assert endpoint["url"].startswith("http://0.0.0.0:") and endpoint["tls"] is None
        assert running.openai_client().models.list()
    finally:
        stop_service_process(running)
    assert "TLS is off on 0.0.0.0: the API key crosses the network in clear" in running.output()
    assert not paths.tls_dir.exists()


def test_the_users_own_certificate_is_served(paths: AppPaths, tmp_path: Path) -> None:
    mine = own_certificate(tmp_path / "mine", ["127.0.0.1", "0.0.0.0"])
    running = start_service_process(
        paths, tmp_path, "--host", "0.0.0.0", "--tls-cert", str(mine.cert_path), "--tls-key", str(mine.key_path)
    )
    try:
        tls = running.client.endpoint()["tls"]
        assert tls == {"fingerprint_sha256": mine.fingerprint, "cert_path": str(mine.cert_path), "self_signed": False}
        assert _served_fingerprint(_port(running)) == mine.fingerprint
        with httpx.Client(verify=_trusting(tls["cert_path"]), trust_env=False, timeout=10) as http:
            answer = http.get(f"https://127.0.0.1:{_port(running)}/v1/models",
                              headers={"Authorization": f"Bearer {running.api_key}"})  # fmt: skip
            assert answer.status_code == 200
    finally:
        stop_service_process(running)
    assert not paths.tls_dir.exists(), "ModelDeck made a certificate of its own besides the user's"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("not a pair", "does not belong to the certificate"),
        ("missing key", "does not exist"),
        ("key alone", "--tls-cert and --tls-key go together"),
    ],
)
def test_a_bad_certificate_stops_the_service_before_it_listens(
    paths: AppPaths, tmp_path: Path, case: str, expected: str
) -> None:
    mine, other = own_certificate(tmp_path / "mine", ["127.0.0.1"]), own_certificate(tmp_path / "other", ["x"])
    tls_args = {
        "not a pair": ["--tls-cert", str(mine.cert_path), "--tls-key", str(other.key_path)],
        "missing key": ["--tls-cert", str(mine.cert_path), "--tls-key", str(tmp_path / "no-key.pem")],
        "key alone": ["--tls-key", str(mine.key_path)],
    }[case]
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--host", "0.0.0.0", "--port", str(port), *tls_args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "MODELDECK_API_KEY": "k"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not paths.service_file.exists()

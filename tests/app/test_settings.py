"""Settings: the file (round trip, bad files kept aside), `serve` filled from it, and the control API on a real
service: validation, LAN exposure, API key regeneration against the real gateway, the Hugging Face token."""

from __future__ import annotations

import errno
import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from app.client import ControlClient, ControlError, find_service
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.http.lan import allowed_hosts, lan_addresses
from app.settings import Settings, SettingsError, load_settings, save_settings, settings_file, with_models_dir
from tests.support.full_disk import errno_of_a_full_disk
from tests.support.memory_keyring import BACKEND_NAME
from tests.support.service import REPO, RunningService, free_port, start_service_process, stop_service_process

# File --------------------------------------------------------------------------------------------------------


def test_settings_round_trip(paths: AppPaths, tmp_path: Path) -> None:
    assert load_settings(paths).settings == Settings()  # no file: the defaults, no problem
    assert load_settings(paths).problem is None
    chosen = Settings(
        gateway_port=9100, control_port=9101, bind_address="0.0.0.0", cors_origins=("http://localhost:3000",),
        idle_ttl_s=600.0, models_dir=str(tmp_path / "models"), theme="dark", start_at_login=True, close_to_tray=False,
    )  # fmt: skip
    save_settings(paths, chosen)
    assert load_settings(paths) == load_settings(paths)
    assert load_settings(paths).settings == chosen
    saved = json.loads(settings_file(paths).read_text(encoding="utf-8"))
    assert saved["schema_version"] == 1 and saved["cors_origins"] == ["http://localhost:3000"]
    assert not list(paths.config.glob(".*.tmp")), "the temporary file of the atomic write was left behind"
    assert with_models_dir(paths, chosen).models_dir == tmp_path / "models"
    assert with_models_dir(paths, Settings()).models_dir == paths.data / "models"


@pytest.mark.parametrize(
    "text",
    ['{"gateway_port": 9100,', "[1, 2]", '{"gateway_port": "high"}', '{"schema_version": 99}', '{"colour": "red"}',
     '{"models_dir": "/tmp/' + "m" * 3000 + '"}'],  # written by hand: a folder that can never be made
)  # fmt: skip
def test_a_bad_file_is_kept_aside_and_the_defaults_used(paths: AppPaths, text: str) -> None:
    path = settings_file(paths)
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    loaded = load_settings(paths)
    assert loaded.settings == Settings()
    assert loaded.problem is not None and "settings.json.bad" in loaded.problem and str(path) in loaded.problem
    assert not path.exists()
    assert path.with_name("settings.json.bad").read_text(encoding="utf-8") == text  # nothing is lost
    assert load_settings(paths).problem is None  # the next start is clean


def test_a_file_that_is_no_text_or_nests_too_deep_is_kept_aside_and_no_earlier_copy_is_lost(paths: AppPaths) -> None:
    """A name typed in another encoding (not UTF-8), JSON nested past Python's recursion limit: set aside like any
    bad file, not a crash of every command; each bad file gets a name of its own beside the ones kept before."""
    path = settings_file(paths)
    path.parent.mkdir(parents=True)
    texts = [b'{"models_dir": "/home/j\xf6rg/models"}', b"[" * 100_000 + b"]" * 100_000, b"{"]
    for text in texts:
        path.write_bytes(text)
        loaded = load_settings(paths)
        assert loaded.settings == Settings() and loaded.problem is not None and "is not valid" in loaded.problem
    kept = [path.with_name(name) for name in ("settings.json.bad", "settings.json.bad-2", "settings.json.bad-3")]
    assert [bad.read_bytes() for bad in kept] == texts


def test_a_file_saved_with_a_byte_order_mark_is_read(paths: AppPaths) -> None:
    """Windows' Notepad starts a UTF-8 file with a byte order mark: the settings in it count, none set aside."""
    path = settings_file(paths)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xef\xbb\xbf" + b'{"theme": "dark", "idle_ttl_s": 600}')
    loaded = load_settings(paths)
    assert loaded.problem is None
    assert loaded.settings == Settings(theme="dark", idle_ttl_s=600.0)
    assert path.exists() and not path.with_name("settings.json.bad").exists()


def test_a_save_that_fails_part_way_leaves_the_old_settings_and_nothing_else(paths: AppPaths) -> None:
    save_settings(paths, Settings(theme="dark"))
    code = (
        "from app.paths import app_paths; from app.settings import Settings, save_settings; "
        "save_settings(app_paths(), Settings(models_dir='/' + 'x' * 100_000))"
    )
    assert errno_of_a_full_disk(code) == str(errno.EFBIG)
    assert load_settings(paths).settings == Settings(theme="dark")
    assert [p.name for p in paths.config.iterdir()] == ["settings.json"], "the temporary file is removed"
    assert stat.S_IMODE(settings_file(paths).stat().st_mode) == 0o600  # private, as every file of ours


def test_two_threads_saving_the_settings_at_once_both_succeed(paths: AppPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service saves settings on worker threads. Each writer is held just before its file takes the name, once
    both have written: two writers sharing one temporary name (the process id) would find it truncated by the other,
    and then moved away."""
    both_written = threading.Barrier(2, timeout=30)
    replace = os.replace

    def replace_once_both_have_written(source: str, target: str) -> None:
        both_written.wait()
        replace(source, target)

    monkeypatch.setattr(os, "replace", replace_once_both_have_written)
    chosen = [Settings(theme="dark"), Settings(theme="light", idle_ttl_s=60.0)]
    with ThreadPoolExecutor(2) as pool:
        for saving in [pool.submit(save_settings, paths, settings) for settings in chosen]:
            saving.result()
    assert load_settings(paths).settings in chosen
    assert [p.name for p in paths.config.iterdir()] == ["settings.json"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gateway_port": 0}, "gateway_port"),
        ({"gateway_port": True}, "gateway_port"),
        ({"control_port": 70000}, "control_port"),
        ({"bind_address": "my-laptop"}, "bind_address"),
        ({"bind_address": 0}, "bind_address"),  # ipaddress reads the number 0 as 0.0.0.0: every interface
        ({"cors_origins": ["*"]}, "cors_origins"),
        ({"cors_origins": "http://a"}, "cors_origins"),
        ({"idle_ttl_s": -1}, "idle_ttl_s"),
        ({"idle_ttl_s": "600"}, "idle_ttl_s"),
        ({"models_dir": "relative/dir"}, "models_dir"),
        ({"models_dir": "/" + "m" * 3000}, "models_dir"),  # a name no file system takes: never a folder
        ({"models_dir": "/not-yet/" + "m" * 3000 + "/models"}, "models_dir"),  # nor below a folder to make
        ({"models_dir": "/m" * 2100}, "models_dir"),  # short names, but 4,200 bytes: a path too long
        ({"theme": "purple"}, "theme"),
        ({"start_at_login": "yes"}, "start_at_login"),
        ({"close_to_tray": 1}, "close_to_tray"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_values_are_refused_by_name(changes: dict[str, object], field: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings().updated(changes)
    assert caught.value.field == field and str(caught.value).startswith(f"{field}: ")


# The service -------------------------------------------------------------------------------------------------


def _serve_without_flags(paths: AppPaths, tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    """`python -m app serve` with no --port: the settings (or $MODELDECK_PORT) decide."""
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "MODELDECK_API_KEY": "k", **env}, cwd=REPO,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log_path.read_text()
        address = find_service(paths)
        if address is not None and address.pid == process.pid:
            return process, log_path
        time.sleep(0.05)
    process.terminate()
    process.wait(30)
    raise AssertionError(f"the service did not start:\n{log_path.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(30)


def test_serve_takes_unset_flags_from_the_settings(paths: AppPaths, tmp_path: Path) -> None:
    port, models_dir = free_port(), tmp_path / "my-models"
    models_dir.mkdir()
    (models_dir / "tiny-model.gguf").write_bytes(b"GGUF" + bytes(60))  # listed by name; never started here
    save_settings(paths, Settings(gateway_port=port, idle_ttl_s=120.0, models_dir=str(models_dir)))
    process, _ = _serve_without_flags(paths, tmp_path, {})
    address = find_service(paths)
    assert address is not None
    client = ControlClient(address)
    try:
        assert address.url == f"http://127.0.0.1:{port}/v1"
        models = {m["id"]: m for m in client.models()}
        assert models[BUNDLED_ID]["idle_ttl_s"] == 120.0
        assert models["tiny-model"]["path"] == str(models_dir / "tiny-model.gguf")
        described = client.settings()
        assert described["running"]["models_dir"] == str(models_dir)
        assert described["restart_required"] == [] and described["problem"] is None
    finally:
        client.close()
        _stop(process)


def test_flags_given_override_the_settings(paths: AppPaths, tmp_path: Path) -> None:
    saved_port = free_port()
    save_settings(paths, Settings(gateway_port=saved_port, idle_ttl_s=120.0))
    running = start_service_process(paths, tmp_path, "--idle-ttl", "30")  # and --port: a free port of its own
    try:
        assert f":{saved_port}/" not in running.url
        assert running.model()["idle_ttl_s"] == 30.0
        # The saved values differ from what runs: they would apply at the next start without these flags.
        assert running.client.settings()["restart_required"] == ["gateway_port", "idle_ttl_s"]
    finally:
        stop_service_process(running)


def test_serve_with_a_bad_settings_file_starts_on_the_defaults(paths: AppPaths, tmp_path: Path) -> None:
    settings_file(paths).parent.mkdir(parents=True)
    settings_file(paths).write_text("{not json", encoding="utf-8")
    port = free_port()  # the default port may be taken on a shared machine: $MODELDECK_PORT stands in for it
    process, log_path = _serve_without_flags(paths, tmp_path, {"MODELDECK_PORT": str(port)})
    address = find_service(paths)
    assert address is not None
    client = ControlClient(address)
    try:
        problem = client.settings()["problem"]
        assert "settings.json.bad" in problem and "is not valid" in problem
        assert address.url == f"http://127.0.0.1:{port}/v1"
        assert "settings.json.bad" in log_path.read_text()
    finally:
        client.close()
        _stop(process)


@pytest.fixture
def keyring_service(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningService]:
    """A service (no model started) whose keyring is the in-memory test backend, with its key kept there."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", BACKEND_NAME)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    running = start_service_process(paths, tmp_path, api_key="")
    yield running
    stop_service_process(running)


def _refused(call: object, status: int) -> str:
    assert callable(call)
    with pytest.raises(ControlError) as caught:
        call()
    assert caught.value.status == status, str(caught.value)
    return str(caught.value)


def test_settings_api_validates_and_saves(keyring_service: RunningService, paths: AppPaths) -> None:
    client = keyring_service.client
    described = client.settings()
    assert described["settings"] == Settings().to_dict()
    assert described["api_key"] == {"present": True, "source": "keyring"}
    for changes, field in [
        ({"gateway_port": "abc"}, "gateway_port"), ({"idle_ttl_s": -5}, "idle_ttl_s"), ({"theme": "purple"}, "theme"),
        ({"nope": 1}, "nope"), ({"bind_address": "10.255.255.254"}, "bind_address"),
        ({"models_dir": str(paths.data / ("m" * 3000))}, "models_dir"),
    ]:  # fmt: skip
        assert field in _refused(lambda c=changes: client.update_settings(c), 400)
    assert not settings_file(paths).exists(), "a refused change must not write the file"

    port = free_port()
    answer = client.update_settings({"gateway_port": port, "idle_ttl_s": 600, "theme": "dark"})
    assert answer["changed"] == ["gateway_port", "idle_ttl_s", "theme"]
    assert answer["restart_required"] == ["gateway_port", "idle_ttl_s"]  # the theme is the window's: no restart
    assert load_settings(paths).settings == Settings(gateway_port=port, idle_ttl_s=600.0, theme="dark")

    settings_file(paths).write_text('{"theme": ', encoding="utf-8")  # spoilt by hand while the service runs
    described = client.settings()
    assert described["settings"] == Settings().to_dict() and "settings.json.bad" in described["problem"]


def test_lan_exposure_needs_a_confirmation(keyring_service: RunningService, paths: AppPaths) -> None:
    client = keyring_service.client
    message = _refused(lambda: client.update_settings({"bind_address": "0.0.0.0"}), 409)
    assert "confirm" in message and "Anyone on your network" in message
    assert load_settings(paths).settings.bind_address == "127.0.0.1"
    answer = client.update_settings({"bind_address": "0.0.0.0"}, confirm_lan_exposure=True)
    assert "bind_address" in answer["restart_required"]  # (and the port: this service runs with --port)
    assert "Anyone on your network" in answer["lan"]["warning"]
    assert all(not a.startswith("127.") for a in answer["lan"]["addresses"])
    assert load_settings(paths).settings.bind_address == "0.0.0.0"


def test_lan_exposure_is_refused_without_a_key(paths: AppPaths, tmp_path: Path) -> None:
    running = start_service_process(paths, tmp_path, "--no-api-key")
    try:
        assert running.client.settings()["api_key"] == {"present": False, "source": "none"}
        change = {"bind_address": "0.0.0.0"}
        message = _refused(lambda: running.client.update_settings(change, confirm_lan_exposure=True), 409)
        assert "without an API key" in message
        assert "none to replace" in _refused(running.client.regenerate_api_key, 409)
        assert not settings_file(paths).exists()
    finally:
        stop_service_process(running)


def test_regenerating_the_key_locks_out_the_old_one(paths: AppPaths, tmp_path: Path) -> None:
    """The test session's keyring is keyring's `fail` backend, so the key lives in the user-only file."""
    running = start_service_process(paths, tmp_path, api_key="")
    try:
        old = running.client.endpoint()["api_key"]
        assert old and paths.api_key_file.read_text(encoding="utf-8").strip() == old
        assert [m.id for m in running.openai_client(old).models.list()]
        fresh = running.client.regenerate_api_key()
        assert fresh["api_key"] != old and fresh["key_source"] == "file"
        assert running.client.endpoint()["api_key"] == fresh["api_key"]
        assert paths.api_key_file.read_text(encoding="utf-8").strip() == fresh["api_key"]
        with pytest.raises(openai.AuthenticationError):
            running.openai_client(old).models.list()
        assert BUNDLED_ID in [m.id for m in running.openai_client(fresh["api_key"]).models.list()]
    finally:
        stop_service_process(running)


def test_a_key_from_the_environment_is_not_replaced(paths: AppPaths, tmp_path: Path) -> None:
    running = start_service_process(paths, tmp_path)
    try:
        assert "MODELDECK_API_KEY" in _refused(running.client.regenerate_api_key, 409)
        assert running.openai_client().models.list()  # the key in use still works
    finally:
        stop_service_process(running)


def test_hf_token_is_kept_in_the_keyring_and_never_returned(keyring_service: RunningService) -> None:
    client, secret = keyring_service.client, "hf_SeCrEt0123456789abcdef"
    assert client.settings()["hf_token"]["set"] is False
    assert "token" in _refused(lambda: client.set_hf_token("   "), 400)
    client.set_hf_token(secret)
    described = client.settings()
    assert described["hf_token"]["set"] is True and described["hf_token"]["source"] == "keyring"
    assert secret not in json.dumps(described)
    assert client.clear_hf_token() is True
    assert client.clear_hf_token() is False
    assert client.settings()["hf_token"]["set"] is False
    stop_service_process(keyring_service)
    assert secret not in keyring_service.output(), "the token reached the service's log"


def test_all_addresses_accept_this_machines_names_and_nothing_else(paths: AppPaths, tmp_path: Path) -> None:
    """Bound to 0.0.0.0 the endpoint answers requests addressed to this machine's LAN addresses and name, and
    still refuses any other Host header (DNS rebinding)."""
    addresses = lan_addresses()
    hosts = allowed_hosts("0.0.0.0")
    assert {"127.0.0.1", "localhost", socket.gethostname().lower()} <= hosts
    assert all((f"[{a}]" if ":" in a else a) in hosts for a in addresses)
    running = start_service_process(paths, tmp_path, "--host", "0.0.0.0")
    try:
        port = running.url.split(":")[2].split("/")[0]
        key = {"Authorization": f"Bearer {running.api_key}"}
        # A LAN bind speaks HTTPS (tests/app/service/http/test_tls_service.py): trust the certificate the service made.
        trusted = ssl.create_default_context(cafile=running.client.endpoint()["tls"]["cert_path"])
        with httpx.Client(trust_env=False, verify=trusted) as http:
            for address in [*addresses[:1], socket.gethostname()]:
                answer = http.get(f"https://127.0.0.1:{port}/v1/models", headers={**key, "Host": f"{address}:{port}"})
                assert answer.status_code == 200, (address, answer.text)
            evil = http.get(f"https://127.0.0.1:{port}/v1/models", headers={**key, "Host": f"evil.example:{port}"})
            assert evil.status_code == 403
    finally:
        stop_service_process(running)

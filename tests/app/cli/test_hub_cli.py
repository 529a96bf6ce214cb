"""`modeldeck search / pull / import / hf-token` as a user runs them, each pull a new process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.hub.cache import RepoCache
from app.hub.pulled import load_pulled
from app.hub.stores import PARTIAL_DIR
from app.paths import AppPaths
from tests.support.hub_server import FakeHub, add_repo, sha256
from tests.support.service import REPO, free_port, start_service_process, stop_service_process
from tests.support.waiting import wait_for

REPO_ID = "org/smol-GGUF"
FILE = "smol-Q4_1.gguf"
SECRET = "hf_secret_" + "s3cr3t" * 5


@pytest.fixture
def hf_home(tmp_path: Path) -> Path:
    return tmp_path / "hf-home"


def env_for(hub_url: str, hf_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE")}
    return env | {"HF_ENDPOINT": hub_url, "HF_HOME": str(hf_home), "PYTHONUNBUFFERED": "1"} | extra


def modeldeck(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
        input=stdin,
    )  # fmt: skip


def start_pull(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app", "pull", REPO_ID], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=REPO, env=env,
        )  # fmt: skip


def stall_first_pull(hub: FakeHub, gguf_bytes: bytes, hf_home: Path, tmp_path: Path, stop: signal.Signals) -> Path:
    """Start a pull that the server stalls after 7 MB, wait for those bytes on disk, then stop it with `stop`."""
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    stall_at = 7_000_000
    hub.faults.stall_after = stall_at
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    process = start_pull(env_for(hub.url, hf_home), tmp_path / "first.log")
    try:
        wait_for(lambda: partial.exists() and partial.stat().st_size == stall_at, 60, "the stall", 0.02)
    finally:
        process.send_signal(stop)
        process.wait(timeout=30)
    hub.faults.stall_after = None
    assert partial.stat().st_size == stall_at
    return tmp_path / "first.log"


def test_a_killed_pull_is_resumed_by_a_new_process(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, tmp_path: Path, paths: AppPaths
) -> None:
    stall_first_pull(hub, gguf_bytes, hf_home, tmp_path, signal.SIGKILL)
    assert load_pulled(paths) == []
    second = modeldeck("pull", REPO_ID, env=env_for(hub.url, hf_home))
    assert second.returncode == 0, second.stderr
    assert [r.range for r in hub.downloads(FILE)] == [None, "bytes=7000000-"]
    [model] = load_pulled(paths)
    assert sha256(model.path.read_bytes()) == sha256(gguf_bytes)
    assert model.path.is_relative_to(hf_home / "hub" / "models--org--smol-GGUF" / "snapshots")
    listed = modeldeck("models", env=env_for(hub.url, hf_home))
    assert model.id in listed.stdout and str(model.path) in listed.stdout


def test_a_pull_killed_again_and_again_never_fetches_a_byte_twice(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, tmp_path: Path, paths: AppPaths
) -> None:
    """Each process is SIGKILLed once the server has sent it a random number of bytes; the next one continues."""
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    chosen = random.Random(5)
    offsets = [0]
    for kill in range(4):
        sent = chosen.randrange(1_000_000, 15_000_000)
        hub.faults.stall_after = sent  # this process gets `sent` bytes, then a connection that hangs
        offsets.append(offsets[-1] + sent)
        process = start_pull(env_for(hub.url, hf_home), tmp_path / f"pull-{kill}.log")
        try:
            wait_for(lambda: partial.exists() and partial.stat().st_size == offsets[-1], 60, "the last offset", 0.02)
        finally:
            process.kill()
            process.wait(timeout=30)
        assert load_pulled(paths) == []
    hub.faults.stall_after = None
    last = modeldeck("pull", REPO_ID, env=env_for(hub.url, hf_home))
    assert last.returncode == 0, last.stderr
    # Every fetch starts where the one before was cut, and each was cut after exactly the bytes it wrote.
    assert [r.range for r in hub.downloads(FILE)] == [None] + [f"bytes={offset}-" for offset in offsets[1:]]
    assert hub.bytes_sent(FILE) == len(gguf_bytes)  # counted by the server: no byte was sent twice
    [model] = load_pulled(paths)
    assert sha256(model.path.read_bytes()) == sha256(gguf_bytes)


def test_ctrl_c_leaves_a_resumable_partial(hub: FakeHub, gguf_bytes: bytes, hf_home: Path, tmp_path: Path) -> None:
    log = stall_first_pull(hub, gguf_bytes, hf_home, tmp_path, signal.SIGINT)
    assert "run the same command to resume" in log.read_text()


def test_pull_with_a_token_never_writes_or_logs_it(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, modeldeck_home: Path
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes}, gated="manual")
    hub.faults.token = SECRET
    refused = modeldeck("pull", REPO_ID, env=env_for(hub.url, hf_home))
    assert refused.returncode == 2
    assert f"accept the license at {hub.url}/{REPO_ID}, then retry" in refused.stderr
    pulled = modeldeck("pull", REPO_ID, env=env_for(hub.url, hf_home, HF_TOKEN=SECRET))
    assert pulled.returncode == 0, pulled.stderr
    resolved = [r for r in hub.requests_for(FILE) if "/resolve/" in r.path and r.status == 302]
    assert resolved and all(r.authorized for r in resolved)
    assert [r.authorization for r in hub.downloads(FILE)] == [None]  # not sent on to the CDN
    assert SECRET not in pulled.stdout + pulled.stderr
    assert not (hf_home / "token").exists()
    written = [p for root in (hf_home, modeldeck_home) for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert written and not any(SECRET.encode() in p.read_bytes() for p in written)


def test_search_prints_results_in_order_and_offline_says_so(hub: FakeHub, hf_home: Path) -> None:
    add_repo(hub, "a/qwen-GGUF", {"x.gguf": b"1"}, likes=5)
    add_repo(hub, "b/qwen-GGUF", {"x.gguf": b"1"}, likes=50)
    found = modeldeck("search", "qwen", "--sort", "likes", "--limit", "5", env=env_for(hub.url, hf_home))
    assert found.returncode == 0
    assert found.stdout.index("b/qwen-GGUF") < found.stdout.index("a/qwen-GGUF")
    offline = modeldeck("search", "qwen", env=env_for(f"http://127.0.0.1:{free_port()}", hf_home))
    assert offline.returncode == 2
    assert "offline: search and download need the network; everything else works" in offline.stderr


def test_import_adds_a_gguf_and_refuses_a_broken_one(
    bundled_gguf: Path, tmp_path: Path, paths: AppPaths, hf_home: Path
) -> None:
    env = env_for("http://127.0.0.1:9", hf_home)
    broken = tmp_path / "broken-Q4_0.gguf"
    broken.write_bytes(bundled_gguf.read_bytes()[:100_000])
    refused = modeldeck("import", str(broken), env=env)
    assert refused.returncode == 2 and "not imported" in refused.stderr.lower() and "truncated" in refused.stderr
    assert not paths.models_dir.exists() or not any(paths.models_dir.iterdir())
    source = tmp_path / "My-Model.Q4_1.gguf"
    source.symlink_to(bundled_gguf)
    imported = modeldeck("import", str(source), env=env)
    assert imported.returncode == 0, imported.stderr
    assert (paths.models_dir / source.name).read_bytes() == bundled_gguf.read_bytes()
    assert "my-model.q4_1" in modeldeck("models", env=env).stdout
    again = modeldeck("import", str(source), env=env)
    assert again.returncode == 2 and "already in the library" in again.stderr


def big_gguf(bundled_gguf: Path, folder: Path) -> Path:
    """A model that takes a while to copy: the bundled GGUF, its tensors followed by 8 GiB of nothing (sparse)."""
    source = folder / "Big-Model.Q4_1.gguf"
    source.write_bytes(bundled_gguf.read_bytes())
    with source.open("r+b") as grown:
        grown.truncate(8 << 30)
    return source


def interrupt_import(source: Path, paths: AppPaths, env: dict[str, str]) -> str:
    """`modeldeck import SOURCE`, Ctrl-C once its copy has begun; what it printed on stderr."""
    partial = paths.models_dir / f".{source.name}.partial"
    process = subprocess.Popen([sys.executable, "-m", "app", "import", str(source)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for(partial.exists, 60, "the copy to begin", 0.02)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        process.communicate()
    assert process.returncode == 130, stderr
    return stderr


def test_ctrl_c_during_an_import_leaves_no_part_of_the_copy(
    bundled_gguf: Path, tmp_path: Path, paths: AppPaths, hf_home: Path
) -> None:
    """With no service the command copies itself; Ctrl-C then must not leave its first gigabytes in the models
    folder."""
    source = big_gguf(bundled_gguf, tmp_path)
    said = interrupt_import(source, paths, env_for("http://127.0.0.1:9", hf_home))
    assert said.strip().splitlines() == ["Import cancelled."]
    assert list(paths.models_dir.iterdir()) == []


def test_ctrl_c_during_an_import_stops_the_services_copy(
    bundled_gguf: Path, tmp_path: Path, paths: AppPaths, hf_home: Path
) -> None:
    """Through a running service the copy is the service's: it stops when the command goes away, rather than
    finishing later and adding the model the person cancelled."""
    source = big_gguf(bundled_gguf, tmp_path)
    service = start_service_process(paths, tmp_path)
    try:
        said = interrupt_import(source, paths, env_for("http://127.0.0.1:9", hf_home))
        assert said.strip().splitlines() == ["Import cancelled."]
        partial = paths.models_dir / f".{source.name}.partial"
        wait_for(lambda: not partial.exists(), 30, "the service to remove the partial copy")
        assert list(paths.models_dir.iterdir()) == []
        assert "big-model.q4_1" not in [m["id"] for m in service.client.models()]
    finally:
        stop_service_process(service)
    assert service.process.returncode == 0, service.output()


def test_hf_token_set_refuses_without_an_os_keyring(hf_home: Path) -> None:
    result = modeldeck("hf-token", "set", env=env_for("http://127.0.0.1:9", hf_home), stdin=SECRET + "\n")
    assert result.returncode == 2
    assert "no OS keyring" in result.stderr and "HF_TOKEN" in result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert not (hf_home / "token").exists()


def test_search_pull_then_launch_and_chat(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, tmp_path: Path, paths: AppPaths
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes, "README.md": b"# smol"}, downloads=7)
    env = env_for(hub.url, hf_home)
    assert REPO_ID in modeldeck("search", "smol", env=env).stdout
    assert modeldeck("pull", f"{REPO_ID}:Q4_1", env=env).returncode == 0
    [model] = load_pulled(paths)
    service = start_service_process(paths, tmp_path, "--model", model.id)
    try:
        [entry] = [m for m in service.client.models() if m["id"] == model.id]
        assert entry["state"] == "ready", service.output()
        chat = service.openai_client().chat.completions.create(
            model=model.id, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
        )
        assert chat.choices[0].message.content
    finally:
        stop_service_process(service)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_file_size_limit_mid_download_keeps_the_partial_and_registers_nothing(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, paths: AppPaths
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    limit = 10_000_000
    # RLIMIT_FSIZE stands in for a full disk: a write past it fails with EFBIG (Python ignores SIGXFSZ).
    limited = (
        f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
        f"sys.argv = ['modeldeck', 'pull', '{REPO_ID}']; runpy.run_module('app', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", limited], capture_output=True, text=True, timeout=120, cwd=REPO,
        env=env_for(hub.url, hf_home),
    )  # fmt: skip
    assert result.returncode == 2
    assert "File too large" in result.stderr and "run the pull again to resume" in result.stderr
    assert load_pulled(paths) == []
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    assert partial.stat().st_size == limit
    resumed = modeldeck("pull", REPO_ID, env=env_for(hub.url, hf_home))
    assert resumed.returncode == 0, resumed.stderr
    assert hub.downloads(FILE)[-1].range == f"bytes={limit}-"
    assert sha256(load_pulled(paths)[0].path.read_bytes()) == sha256(gguf_bytes)


def test_pull_into_a_models_dir_is_killed_resumed_and_listed(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, tmp_path: Path, paths: AppPaths
) -> None:
    """`pull --models-dir`: the partial waits in the folder's hidden partial folder, a new process resumes it,
    and the file ends up as DIR/FILE, listed by `modeldeck models`; the Hugging Face cache is not touched."""
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    mine = tmp_path / "my models"
    cut = 6_000_000
    hub.faults.stall_after = cut
    partial = mine / ".modeldeck-partial" / f"{sha256(gguf_bytes)}.incomplete"
    with (tmp_path / "first.log").open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "pull", REPO_ID, "--models-dir", str(mine)], stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env_for(hub.url, hf_home),
        )  # fmt: skip
    try:
        wait_for(lambda: partial.exists() and partial.stat().st_size == cut, 60, "the partial file at the cut", 0.02)
    finally:
        process.kill()
        process.wait(timeout=30)
    hub.faults.stall_after = None
    resumed = modeldeck("pull", REPO_ID, "--models-dir", str(mine), env=env_for(hub.url, hf_home))
    assert resumed.returncode == 0, resumed.stderr
    assert hub.downloads(FILE)[-1].range == f"bytes={cut}-" and hub.bytes_sent(FILE) == len(gguf_bytes)
    assert (mine / FILE).read_bytes() == gguf_bytes and not partial.exists()
    assert not (hf_home / "hub").exists()
    [model] = load_pulled(paths)
    assert model.path == mine / FILE
    listed = modeldeck("models", "--models-dir", str(mine), env=env_for(hub.url, hf_home)).stdout
    assert listed.count(str(mine / FILE)) == 1 and model.id in listed
    both = modeldeck(
        "pull", REPO_ID, "--models-dir", str(mine), "--cache-dir", str(tmp_path), env=env_for(hub.url, hf_home)
    )
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_hf_hub_offline_is_said_plainly_and_the_rest_still_works(
    hub: FakeHub, gguf_bytes: bytes, hf_home: Path, paths: AppPaths
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    env = env_for(hub.url, hf_home, HF_HUB_OFFLINE="1")
    for command in (("search", "smol"), ("pull", REPO_ID), ("show", REPO_ID)):
        result = modeldeck(*command, env=env)
        assert result.returncode == 2, result.stdout
        assert "offline: search and download need the network; everything else works" in result.stderr
        assert "HF_HUB_OFFLINE is set" in result.stderr
    assert hub.downloads(FILE) == [] and load_pulled(paths) == []
    listed = modeldeck("models", env=env)
    assert listed.returncode == 0 and "smollm2-135m-instruct" in listed.stdout


def test_the_progress_bar_says_when_it_is_verifying() -> None:
    import io

    from app.cli.progress import ProgressBar
    from app.task import Progress

    out = io.StringIO()
    bar = ProgressBar(out)
    bar(Progress(100, 100, None, 0.0, "dir/big.safetensors", phase="verify", checked=25, check_total=100))
    bar(Progress(100, 100, 5e6, 0.0, "dir/big.safetensors", finished=True))
    first, second = out.getvalue().splitlines()
    assert "25.0% verifying big.safetensors" in first
    assert "100.0%" in second and "MB/s" in second


def test_search_show_and_pull_a_safetensors_model_for_vllm(hub: FakeHub, hf_home: Path, paths: AppPaths) -> None:
    from tests.app.hub.test_hub_safetensors import WANTED, model_files

    add_repo(hub, "org/tiny-llama", model_files(), tags=("safetensors", "text-generation"))
    env = env_for(hub.url, hf_home)
    assert "org/tiny-llama" not in modeldeck("search", "tiny", env=env).stdout
    assert "org/tiny-llama" in modeldeck("search", "tiny", "--format", "safetensors", env=env).stdout
    shown = modeldeck("show", "org/tiny-llama", env=env)
    assert "safetensors" in shown.stdout and f"{len(WANTED)} files" in shown.stdout
    pulled = modeldeck("pull", "org/tiny-llama", env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert "tiny-llama: org/tiny-llama safetensors" in pulled.stdout and "for vLLM" in pulled.stdout
    [model] = load_pulled(paths)
    assert sorted(p.name for p in model.path.iterdir()) == WANTED
    assert str(model.path) in modeldeck("models", env=env).stdout


@pytest.mark.parametrize("users_copy", [False, True])
def test_ctrl_c_during_a_pull_into_a_models_dir_takes_back_the_files_it_placed(
    users_copy: bool, hub: FakeHub, hf_home: Path, tmp_path: Path, paths: AppPaths
) -> None:
    """A model pulled into a models folder and stopped with Ctrl-C left the files already placed there, part of a
    model. They go back among the partials (the next pull places them again, fetching nothing twice), with the
    model's subfolder when the pull made it; a file that was there before the pull stays."""
    from tests.app.hub.test_hub_safetensors import WANTED, model_files

    files = model_files()
    add_repo(hub, "org/tiny-llama", files, tags=("safetensors", "text-generation"))
    mine = tmp_path / "my models"
    folder = mine / "org--tiny-llama"
    if users_copy:
        folder.mkdir(parents=True)
        (folder / "config.json").write_bytes(files["config.json"])
    held, release = threading.Event(), threading.Event()

    def hold(name: str) -> None:  # the shards and the small files before it arrive and are placed; this one waits
        if name == "tokenizer.json":
            held.set()
            release.wait(60)

    hub.faults.before_last_chunk = hold
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "pull", "org/tiny-llama", "--models-dir", str(mine)], stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env_for(hub.url, hf_home),
            # As from a terminal, even where the suite runs as a background job with SIGINT ignored
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    try:
        assert held.wait(60), log.read_text()
        assert (folder / "model-00002-of-00002.safetensors").is_file()  # placed
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130, log.read_text()
    finally:
        hub.faults.before_last_chunk = None
        release.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "run the same command to resume" in log.read_text()
    if users_copy:
        assert [p.name for p in folder.iterdir()] == ["config.json"]
        assert (folder / "config.json").read_bytes() == files["config.json"]
    else:
        assert not folder.exists()
    assert [p.name for p in mine.iterdir()] == [PARTIAL_DIR] + (["org--tiny-llama"] if users_copy else [])
    assert load_pulled(paths) == []
    resumed = modeldeck("pull", "org/tiny-llama", "--models-dir", str(mine), env=env_for(hub.url, hf_home))
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in folder.iterdir()) == WANTED
    for name in (n for n in WANTED if n != "tokenizer.json"):  # fetched once, and the user's copy not at all
        assert hub.bytes_sent(name) == (0 if users_copy and name == "config.json" else len(files[name])), name
    [model] = load_pulled(paths)
    assert model.path == folder

"""The Hub and library routes of the control API, on a real service talking to the stand-in Hub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.client import ControlClient, ControlError
from app.hub.cache import RepoCache
from app.hub.library import BUNDLED_ID
from app.hub.pulled import load_pulled
from app.hub.stores import PARTIAL_DIR
from app.paths import AppPaths
from app.service.jobs.downloads import MAX_PARALLEL
from tests.support.hub_server import FakeHub, add_repo, sha256
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

REPO_ID = "org/smol-GGUF"
FILE = "smol-Q4_1.gguf"
DROP_BYTES = 2_000_000


@pytest.fixture
def hf_home(tmp_path: Path) -> Path:
    return tmp_path / "hf-home"


@pytest.fixture
def hub_env(hub: FakeHub, hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service started in this test talks to the stand-in Hub, with its cache under tmp_path."""
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(hf_home))


@pytest.fixture
def hub_service(hub_env: None, paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """A service with no model started, whose Hub is the stand-in and whose cache is under tmp_path."""
    running = start_service_process(paths, tmp_path)
    yield running
    stop_service_process(running)


def error_of(call: Any, *args: Any) -> ControlError:
    with pytest.raises(ControlError) as caught:
        call(*args)
    return caught.value


def download(client: ControlClient, download_id: str) -> dict[str, Any]:
    return next(d for d in client.downloads() if d["id"] == download_id)


def wait_state(client: ControlClient, download_id: str, *states: str, timeout_s: float = 60) -> dict[str, Any]:
    wait_for(lambda: download(client, download_id)["state"] in states, timeout_s, f"download in {states}", 0.02)
    return download(client, download_id)


def model_ids(client: ControlClient) -> set[str]:
    return {m["id"] for m in client.models()}


def test_search_and_model_page(hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes, "smol-Q8_0.gguf": gguf_bytes + b"\0" * 1024, "README.md": b"# s"},
             downloads=7, likes=1)  # fmt: skip
    add_repo(hub, "org/smol-popular-GGUF", {FILE: gguf_bytes}, downloads=900, likes=0)
    client = hub_service.client
    assert [r["id"] for r in client.hub_search("smol")] == ["org/smol-popular-GGUF", REPO_ID]
    assert client.hub_search("smol", sort="likes")[0]["id"] == REPO_ID
    page = client.hub_model(REPO_ID)
    assert [(v["name"], v["size"]) for v in page["variants"]] == [
        ("Q4_1", len(gguf_bytes)),
        ("Q8_0", len(gguf_bytes) + 1024),
    ]
    assert {f["path"] for f in page["files"]} == {FILE, "smol-Q8_0.gguf", "README.md"}
    assert page["license"] == "apache-2.0" and page["gated"] is False
    # One header (the smaller file's), read with Range requests, plans both: the larger has more bits per weight.
    assert page["recommended"] == "Q8_0" and page["recommendation"]["source"] == "planner"
    assert page["recommendation_basis"].startswith("plan for this machine: engine llama.cpp")
    plan = page["recommendation"]["plan"]
    assert plan["max_context"] >= plan["context"] > 0 and plan["memory"]["ram"] > 0 and plan["reasons"]
    header_reads = hub.downloads(FILE)
    assert header_reads and all(r.range and r.range.startswith("bytes=0-") for r in header_reads)
    assert hub.downloads("smol-Q8_0.gguf") == []
    client.hub_model(REPO_ID)
    assert hub.downloads(FILE) == header_reads  # kept per (repo, commit, file)
    missing = error_of(client.hub_model, "org/nothing-here")
    assert missing.status == 404 and "was not found" in str(missing)
    assert error_of(client.hub_search, "x", "newest").status == 400
    assert error_of(client.start_download, REPO_ID).status == 400  # two variants: which one?


def test_a_header_that_cannot_be_read_falls_back_to_the_size_based_pick(
    hub: FakeHub, hub_service: RunningService
) -> None:
    add_repo(hub, REPO_ID, {"smol-Q4_0.gguf": b"PK\3\4" * 1024})
    page = hub_service.client.hub_model(REPO_ID)
    assert page["recommended"] == "Q4_0" and page["recommendation"] == {"source": "size", "plan": None}
    basis = page["recommendation_basis"]
    assert basis.startswith("size-based pick") and "no header could be read" in basis and "not a GGUF" in basis


def test_offline_search_says_so(hub_service: RunningService, hub: FakeHub) -> None:
    hub.stop()
    error = error_of(hub_service.client.hub_search, "smol")
    assert error.status == 503 and str(error).startswith("Offline: search and download need the network")


def test_a_gated_model_names_the_license_page_and_download_again_resumes_the_job(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes
) -> None:
    add_repo(hub, "org/gated-GGUF", {FILE: gguf_bytes}, gated="manual")
    hub.faults.token = "hf_granted_" + "x" * 20  # the service has none
    client = hub_service.client
    assert client.hub_model("org/gated-GGUF")["gated"] is True
    job = client.start_download("org/gated-GGUF", "Q4_1")
    failed = wait_state(client, job["id"], "failed")
    assert f"accept the license at {hub.url}/org/gated-GGUF" in failed["error"]
    # Access granted, Download again resumes the failed job: a second one would share its partial file, and
    # cancelling the first would delete it under the second.
    hub.faults.token = None  # a request without a token is now authorized
    assert client.start_download("org/gated-GGUF", "Q4_1")["id"] == job["id"]
    done = wait_state(client, job["id"], "completed", "failed")
    assert done["state"] == "completed", done["error"]
    assert [d["id"] for d in client.downloads()] == [job["id"]]


def test_download_through_the_service_then_start_verify_and_delete(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, paths: AppPaths, hf_home: Path
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    client = hub_service.client
    events = client.events()
    seen: list[dict[str, Any]] = []
    try:
        job = client.start_download(REPO_ID, "Q4_1")
        assert job["state"] == "running" and job["total"] == len(gguf_bytes)
        for event in events:
            if event["type"] == "download":
                seen.append(event["download"])
                if event["download"]["state"] != "running":
                    break
    finally:
        events.close()
    done = seen[-1]
    assert done["state"] == "completed", done
    assert done["done"] == done["total"] == len(gguf_bytes)
    model_id = done["model_id"]
    assert model_id in model_ids(client)
    [entry] = [m for m in client.library()["models"] if m["id"] == model_id]
    assert entry["source"] == "hub" and entry["size_on_disk"] == len(gguf_bytes) and entry["repo"] == REPO_ID
    assert client.verify_model(model_id)["ok"] is True
    assert client.start_model(model_id, wait=True)["state"] == "ready", hub_service.output()
    busy = error_of(client.delete_model, model_id)
    assert busy.status == 409 and "stop it" in str(busy)
    client.stop_model(model_id)
    client.delete_model(model_id)
    assert model_id not in model_ids(client) and load_pulled(paths) == []
    assert not RepoCache(hf_home / "hub", REPO_ID).blob(sha256(gguf_bytes)).exists()


def test_pause_keeps_the_partial_and_resume_continues_from_it(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, hf_home: Path
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    # Each answer stops after 2 MB and the downloader waits a second before resuming: time to pause it.
    hub.faults.drop_after, hub.faults.drop_times = DROP_BYTES, 1000
    client = hub_service.client
    job = client.start_download(REPO_ID, "Q4_1")
    wait_for(lambda: download(client, job["id"])["done"] >= DROP_BYTES, 30, "the drop point", 0.02)
    client.control_download(job["id"], "pause")
    paused = wait_state(client, job["id"], "paused")
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    kept = partial.stat().st_size
    assert kept >= DROP_BYTES and paused["done"] == kept
    hub.faults.drop_times = 0
    fetched_before = len(hub.downloads(FILE))
    client.control_download(job["id"], "resume")
    done = wait_state(client, job["id"], "completed", "failed")
    assert done["state"] == "completed", done["error"]
    resumed = hub.downloads(FILE)[fetched_before:]
    assert resumed[0].range == f"bytes={kept}-"  # the kept bytes are not fetched again
    assert done["model_id"] in model_ids(client)


def test_cancel_drops_the_partial_and_registers_nothing(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, hf_home: Path, paths: AppPaths
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    hub.faults.drop_after, hub.faults.drop_times = DROP_BYTES, 1000
    client = hub_service.client
    before = model_ids(client)
    job = client.start_download(REPO_ID, "Q4_1")
    wait_for(lambda: download(client, job["id"])["done"] >= DROP_BYTES, 30, "the drop point", 0.02)
    assert client.control_download(job["id"], "cancel")["state"] == "cancelled"
    assert not RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes)).exists()
    assert model_ids(client) == before and load_pulled(paths) == []
    assert error_of(client.control_download, job["id"], "resume").status == 409


def test_a_download_waiting_for_its_turn_is_paused_and_cancelled_at_once(
    hub: FakeHub, hub_service: RunningService, gguf_slice: bytes
) -> None:
    """MAX_PARALLEL downloads run at once; one more waits for a thread. Pausing or cancelling it must not wait for
    one of the others to end (here they hang on a stalled Hub until the test ends), nor must the service's stop."""
    repos = [f"org/smol-{n}-GGUF" for n in range(MAX_PARALLEL + 1)]
    for repo in repos:
        add_repo(hub, repo, {FILE: gguf_slice})
    hub.faults.stall_after = 1_000_000
    client = hub_service.client
    jobs = [client.start_download(repo, "Q4_1")["id"] for repo in repos]
    running, waiting = jobs[:MAX_PARALLEL], jobs[MAX_PARALLEL]
    for job_id in running:
        wait_for(lambda j=job_id: download(client, j)["done"] > 0, 30, f"{job_id} fetching", 0.02)
    assert download(client, waiting)["done"] == 0
    client.control_download(waiting, "pause")
    assert wait_state(client, waiting, "paused", timeout_s=10)["done"] == 0
    client.control_download(waiting, "resume")
    assert client.control_download(waiting, "cancel")["state"] == "cancelled"
    assert [download(client, j)["state"] for j in running] == ["running"] * MAX_PARALLEL
    assert not hub.downloads(FILE)[MAX_PARALLEL:]  # the one that waited never fetched a byte
    # The service stops although three downloads are blocked reading: its exit does not wait for their timeouts.
    hub_service.process.terminate()
    assert hub_service.process.wait(timeout=15) == 0


def test_library_refuses_to_delete_the_bundled_model_and_a_corrupt_import(
    hub_service: RunningService, tmp_path: Path, bundled_gguf: Path
) -> None:
    client = hub_service.client
    library = client.library()
    assert {d["what"] for d in library["disk"]} == {"models folder", "Hugging Face cache"}
    assert all(d["free"] > 0 for d in library["disk"])
    [bundled] = [m for m in library["models"] if m["id"] == BUNDLED_ID]
    assert bundled["source"] == "bundled" and bundled["deletable"] is False and bundled["size_on_disk"] > 0
    refused = error_of(client.delete_model, BUNDLED_ID)
    assert refused.status == 403 and "cannot be deleted" in str(refused)
    assert client.verify_model(BUNDLED_ID)["ok"] is True
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\xff" * 64)
    corrupt = error_of(client.import_model, str(broken))
    assert corrupt.status == 422 and str(corrupt).startswith("Not imported:") and "broken.gguf" in str(corrupt)
    assert "broken" not in model_ids(client)
    good = tmp_path / "tiny-copy.gguf"
    good.write_bytes(bundled_gguf.read_bytes())
    imported = client.import_model(str(good))
    assert imported["id"] == "tiny-copy" and "tiny-copy" in model_ids(client)
    assert error_of(client.import_model, str(good)).status == 409
    client.delete_model("tiny-copy")
    assert "tiny-copy" not in model_ids(client) and good.exists()


def test_a_download_or_import_naming_a_field_the_service_does_not_read_is_refused(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, tmp_path: Path, bundled_gguf: Path
) -> None:
    """As the other control routes refuse one: a misspelt or unsupported field is never dropped unseen."""
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    client, address = hub_service.client, hub_service.client.address
    good = tmp_path / "tiny-copy.gguf"
    good.write_bytes(bundled_gguf.read_bytes())
    headers = {"Authorization": f"Bearer {address.token}"}
    with httpx.Client(base_url=address.control_url, headers=headers, trust_env=False, timeout=30) as http:
        pinned = http.post("/api/downloads", json={"repo": REPO_ID, "variant": "Q4_1", "revision": "abc"})
        assert pinned.status_code == 400, pinned.text
        assert pinned.json()["error"]["message"] == "Unknown field 'revision'; known: repo, variant, file."
        assert pinned.json()["error"]["param"] == "revision"
        both = http.post("/api/downloads", json={"repo": REPO_ID, "Variant": "Q4_1", "files": FILE})
        assert both.json()["error"]["message"] == "Unknown fields 'Variant', 'files'; known: repo, variant, file."
        linked = http.post("/api/library/import", json={"path": str(good), "lnk": True})  # would copy, not link
        assert linked.status_code == 400, linked.text
        assert linked.json()["error"]["message"] == "Unknown field 'lnk'; known: path, link."
    assert client.downloads() == [] and "tiny-copy" not in model_ids(client)


def test_a_download_cut_by_a_service_stop_resumes_in_the_next_service(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, hf_home: Path, paths: AppPaths, tmp_path: Path
) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    hub.faults.drop_after, hub.faults.drop_times = DROP_BYTES, 1000
    job = hub_service.client.start_download(REPO_ID, "Q4_1")
    wait_for(lambda: download(hub_service.client, job["id"])["done"] >= DROP_BYTES, 30, "the drop point", 0.02)
    stop_service_process(hub_service)  # SIGTERM: the service pauses its downloads, then exits
    assert hub_service.process.returncode == 0, hub_service.output()
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    kept = partial.stat().st_size
    assert kept >= DROP_BYTES
    hub.faults.drop_times = 0
    fetched_before = len(hub.downloads(FILE))
    again = start_service_process(paths, tmp_path)
    try:
        second = again.client.start_download(REPO_ID, "Q4_1")
        assert second["id"] == job["id"]  # the job kept from the first service is resumed, not started twice
        done = wait_state(again.client, second["id"], "completed", "failed")
        assert done["state"] == "completed", done["error"]
        assert hub.downloads(FILE)[fetched_before].range == f"bytes={kept}-"
    finally:
        stop_service_process(again)


def test_a_download_cut_by_a_crash_comes_back_paused_and_resumes_from_the_bytes_on_disk(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, hf_home: Path, paths: AppPaths, tmp_path: Path
) -> None:
    """The service is SIGKILLed mid-download: the next one lists the job as paused with the bytes on disk, and
    resuming it fetches only the rest (the stand-in Hub counts every byte it sends)."""
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    cut = 5_000_000
    hub.faults.stall_after = cut
    job = hub_service.client.start_download(REPO_ID, "Q4_1")
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    wait_for(lambda: partial.exists() and partial.stat().st_size == cut, 30, "the partial file at the cut", 0.02)
    hub_service.process.kill()
    hub_service.process.wait(timeout=30)
    hub.faults.stall_after = None
    again = start_service_process(paths, tmp_path)
    try:
        restored = download(again.client, job["id"])
        assert restored["state"] == "paused" and restored["done"] == cut and restored["total"] == len(gguf_bytes)
        assert restored["repo"] == REPO_ID and restored["variant"] == "Q4_1"
        again.client.control_download(job["id"], "resume")
        done = wait_state(again.client, job["id"], "completed", "failed")
        assert done["state"] == "completed", done["error"]
        assert done["model_id"] in model_ids(again.client)
        assert hub.downloads(FILE)[-1].range == f"bytes={cut}-"
        assert hub.bytes_sent(FILE) == len(gguf_bytes)  # not one byte fetched twice
        # A new download gets a new id, never one of a kept job.
        other = again.client.start_download(REPO_ID, "Q4_1")
        assert other["id"] != job["id"]
        assert wait_state(again.client, other["id"], "completed", "failed")["state"] == "completed"
    finally:
        stop_service_process(again)
    third = start_service_process(paths, tmp_path)
    try:
        kept = {d["id"]: d["state"] for d in third.client.downloads()}
        assert kept == {job["id"]: "completed", other["id"]: "completed"}
    finally:
        stop_service_process(third)


def test_a_safetensors_model_is_found_shown_downloaded_and_listed_for_vllm(
    hub: FakeHub, hub_service: RunningService, paths: AppPaths
) -> None:
    from tests.app.hub.test_hub_safetensors import WANTED, model_files

    add_repo(hub, "org/tiny-llama", model_files(), tags=("safetensors", "text-generation"))
    add_repo(hub, "org/tiny-llama-GGUF", {"x.gguf": b"1"})
    client = hub_service.client
    assert [m["id"] for m in client.hub_search("tiny", model_format="safetensors")] == ["org/tiny-llama"]
    assert [m["id"] for m in client.hub_search("tiny")] == ["org/tiny-llama-GGUF"]
    assert error_of(client.hub_search, "tiny", "downloads", 20, "pickle").status == 400
    page = client.hub_model("org/tiny-llama")
    [variant] = page["variants"]
    assert variant["name"] == "safetensors" and sorted(variant["files"]) == WANTED and variant["complete"]
    job = client.start_download("org/tiny-llama", "safetensors")
    done = wait_state(client, job["id"], "completed", "failed")
    assert done["state"] == "completed", done["error"]
    [entry] = [m for m in client.models() if m["id"] == done["model_id"]]
    assert entry["engine"] == "vllm"
    [pulled] = load_pulled(paths)
    assert entry["path"] == str(pulled.path) and pulled.path.is_dir()
    assert client.verify_model(done["model_id"])["ok"]
    # No vLLM here: starting it says so, rather than reading the folder as a GGUF.
    started = client.start_model(done["model_id"], wait=True)
    assert started["state"] == "failed" and "for vLLM, which cannot start here" in started["message"]
    assert "vLLM is not installed" in started["message"] and "`modeldeck vllm-env install`" in started["message"]


def test_serve_models_dir_downloads_into_it_and_a_kept_job_resumes_there(
    hub: FakeHub, hub_env: None, gguf_bytes: bytes, hf_home: Path, paths: AppPaths, tmp_path: Path
) -> None:
    """Downloads of a service started with --models-dir land in that folder as plain files; a job cut by a crash
    remembers its folder, so a service started without the option still finishes it there."""
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    mine = tmp_path / "my-models"
    cut = 4_000_000
    hub.faults.stall_after = cut
    first = start_service_process(paths, tmp_path, "--models-dir", str(mine))
    try:
        disk = {d["what"]: d["path"] for d in first.client.library()["disk"]}
        assert disk["downloads folder"] == str(mine)
        job = first.client.start_download(REPO_ID, "Q4_1")
        partial = mine / ".modeldeck-partial" / f"{sha256(gguf_bytes)}.incomplete"
        wait_for(lambda: partial.exists() and partial.stat().st_size == cut, 30, "the partial file at the cut", 0.02)
        first.process.kill()
        first.process.wait(timeout=30)
    finally:
        stop_service_process(first)
    hub.faults.stall_after = None
    again = start_service_process(paths, tmp_path)
    try:
        assert download(again.client, job["id"])["done"] == cut
        again.client.control_download(job["id"], "resume")
        done = wait_state(again.client, job["id"], "completed", "failed")
        assert done["state"] == "completed", done["error"]
        assert (mine / FILE).read_bytes() == gguf_bytes and not (hf_home / "hub").exists()
        [entry] = [m for m in again.client.models() if m["id"] == done["model_id"]]
        assert entry["path"] == str(mine / FILE)
        assert hub.bytes_sent(FILE) == len(gguf_bytes)
        assert "downloads folder" not in {d["what"] for d in again.client.library()["disk"]}  # no --models-dir now
    finally:
        stop_service_process(again)


def test_a_cancelled_split_pull_takes_back_the_parts_it_placed_in_the_folder(
    hub: FakeHub, hub_env: None, gguf_slice: bytes, gguf_bytes: bytes, paths: AppPaths, tmp_path: Path
) -> None:
    """A split GGUF pulled into a models folder and cancelled, while it runs or after a crash: the parts it placed
    and its partial file go, and a part that was there before the pull stays."""
    first, placed, last = (f"smol-Q4_1-0000{n}-of-00003.gguf" for n in (1, 2, 3))
    parts = {first: gguf_slice, placed: gguf_slice[:500_000], last: gguf_bytes}
    add_repo(hub, REPO_ID, parts)
    # Every answer ends after 1 MB: the two small parts arrive whole, the last one a megabyte a try.
    hub.faults.drop_after, hub.faults.drop_times = 1_000_000, 1000
    mine = tmp_path / "my-models"
    mine.mkdir()
    (mine / first).write_bytes(gguf_slice)  # the user's copy of the first part, from before the pull
    partials = mine / PARTIAL_DIR
    started_last = len(parts[first]) + len(parts[placed])  # bytes done once the last part is under way

    def left_behind() -> list[str]:
        return sorted(p.name for p in mine.iterdir() if p.name != PARTIAL_DIR) + [
            p.name for p in partials.glob("*.incomplete")
        ]

    service = start_service_process(paths, tmp_path, "--models-dir", str(mine))
    try:
        job = service.client.start_download(REPO_ID, "Q4_1")
        wait_for(lambda: download(service.client, job["id"])["done"] > started_last, 60, "the last part", 0.02)
        assert (mine / placed).read_bytes() == parts[placed]
        assert service.client.control_download(job["id"], "cancel")["state"] == "cancelled"
        assert left_behind() == [first] and (mine / first).read_bytes() == gguf_slice

        # The service is killed while the pull runs; the next one cancels the job it finds paused.
        job = service.client.start_download(REPO_ID, "Q4_1")
        wait_for(lambda: download(service.client, job["id"])["done"] > started_last, 60, "the last part", 0.02)
        service.process.kill()
        service.process.wait(timeout=30)
    finally:
        stop_service_process(service)
    assert (mine / placed).exists() and any(partials.glob("*.incomplete"))
    again = start_service_process(paths, tmp_path)
    try:
        assert download(again.client, job["id"])["state"] == "paused"
        assert again.client.control_download(job["id"], "cancel")["state"] == "cancelled"
        assert left_behind() == [first] and (mine / first).read_bytes() == gguf_slice
        assert load_pulled(paths) == []
    finally:
        stop_service_process(again)


def hold_the_rest_after(hub: FakeHub, last_sent: str) -> None:
    """Once `last_sent` is on its way, the Hub answers every further download "429, retry in a minute": the pull
    waits there, where a pause or a cancel finds it at once."""

    def hold(name: str) -> None:
        if name == last_sent:
            hub.faults.too_many_times, hub.faults.retry_after_s = 1000, 60

    hub.faults.too_many_times, hub.faults.before_last_chunk = 0, hold


def placed_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != PARTIAL_DIR)


def test_a_cancelled_safetensors_pull_removes_the_subfolder_it_made(
    hub: FakeHub, hub_env: None, paths: AppPaths, tmp_path: Path
) -> None:
    """Cancelled once its shards are placed: the model's subfolder goes with them when the pull made it, and an
    empty one that was there before the pull stays."""
    from tests.app.hub.test_hub_safetensors import model_files

    add_repo(hub, "org/tiny-llama", model_files())
    mine = tmp_path / "my-models"
    folder, last_shard = mine / "org--tiny-llama", "model-00002-of-00002.safetensors"
    service = start_service_process(paths, tmp_path, "--models-dir", str(mine))
    try:
        for there_before in (False, True):
            if there_before:
                folder.mkdir()
            hold_the_rest_after(hub, last_shard)
            job = service.client.start_download("org/tiny-llama", "safetensors")
            wait_for(lambda: (folder / last_shard).is_file(), 60, "the shards placed", 0.02)
            assert service.client.control_download(job["id"], "cancel")["state"] == "cancelled"
            assert placed_files(mine) == (["org--tiny-llama"] if there_before else [])
            assert not (there_before and any(folder.iterdir()))
    finally:
        stop_service_process(service)


def test_a_resumed_pull_that_fails_its_model_check_takes_back_what_every_run_placed(
    hub: FakeHub, hub_env: None, gguf_slice: bytes, paths: AppPaths, tmp_path: Path
) -> None:
    """A split GGUF whose first part no engine can read, paused once that part is placed, then resumed: the failed
    check takes back both parts, the first one placed by the run before. The failed job then owns nothing in the
    folder: cancelling it later leaves the file that has taken the name meanwhile."""
    first, second = (f"smol-Q4_1-0000{n}-of-00002.gguf" for n in (1, 2))
    add_repo(hub, REPO_ID, {first: gguf_slice, second: gguf_slice[:500_000]})
    mine = tmp_path / "my-models"
    hold_the_rest_after(hub, first)
    service = start_service_process(paths, tmp_path, "--models-dir", str(mine))
    try:
        client = service.client
        job = client.start_download(REPO_ID, "Q4_1")
        wait_for(lambda: (mine / first).is_file(), 60, "the first part placed", 0.02)
        client.control_download(job["id"], "pause")
        wait_state(client, job["id"], "paused")
        hub.faults.too_many_times, hub.faults.before_last_chunk = 0, None
        client.control_download(job["id"], "resume")
        failed = wait_state(client, job["id"], "failed", "completed")
        assert failed["state"] == "failed" and "not a usable GGUF" in failed["error"]
        assert placed_files(mine) == []
        (mine / first).write_bytes(b"the user's own file")
        assert client.control_download(job["id"], "cancel")["state"] == "cancelled"
        assert (mine / first).read_bytes() == b"the user's own file"
    finally:
        stop_service_process(service)


@pytest.mark.skipif(not hasattr(__import__("resource"), "prlimit"), reason="resource.prlimit is Linux-only")
def test_a_full_disk_fails_the_download_plainly_and_harms_nothing_else(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes, hf_home: Path, paths: AppPaths
) -> None:
    """RLIMIT_FSIZE set on the running service stands in for a full disk: a write past it fails with EFBIG."""
    import resource

    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    client = hub_service.client
    before = model_ids(client)
    limit = 10_000_000
    # The soft limit only: lowering a hard limit could not be undone without privileges.
    resource.prlimit(hub_service.process.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    job = client.start_download(REPO_ID, "Q4_1")
    failed = wait_state(client, job["id"], "failed", "completed")
    assert failed["state"] == "failed"
    assert "File too large" in failed["error"] and "run the pull again to resume" in failed["error"]
    assert model_ids(client) == before and load_pulled(paths) == []
    partial = RepoCache(hf_home / "hub", REPO_ID).incomplete(sha256(gguf_bytes))
    assert partial.stat().st_size == limit  # kept for a resume once there is room
    assert client.library()["models"]  # the service goes on answering
    resource.prlimit(hub_service.process.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
    client.control_download(job["id"], "resume")
    done = wait_state(client, job["id"], "completed", "failed")
    assert done["state"] == "completed", done["error"]
    assert hub.downloads(FILE)[-1].range == f"bytes={limit}-"


def test_an_import_of_a_path_too_long_to_look_at_is_a_400_saying_so(hub_service: RunningService) -> None:
    """A name of 5,000 characters made `is_file` raise ENAMETOOLONG: a bare-text 500. An OSError of the path the user
    gave is a refusal in the API's JSON shape, with the path cut short in the message."""
    address = hub_service.client.address
    with httpx.Client(base_url=address.control_url, headers={"Authorization": f"Bearer {address.token}"},
                      timeout=30, trust_env=False) as api:  # fmt: skip
        answer = api.post("/api/library/import", json={"path": "/" + "a" * 5000 + ".gguf"})
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert message.startswith("Not imported: /aaa") and "File name too long" in message, message
    assert "(5006 characters)" in message and len(message) < 400, message
    assert "Traceback" not in hub_service.output()

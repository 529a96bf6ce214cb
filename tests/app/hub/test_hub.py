"""Search, model pages and resumable, verified downloads against a local stand-in for the Hub."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from app.hub import hub_api
from app.hub.cache import RepoCache, UnsafeName, check_filename
from app.hub.download import RetryPolicy, _open_partial, download_files, resolve
from app.hub.errors import OFFLINE_MESSAGE, HubError, OfflineError
from app.hub.hub_api import ModelDetails, model_details, search_models
from app.hub.library import known_models
from app.hub.pull import PullRequest, choose_variant, pull
from app.hub.pulled import load_pulled
from app.hub.variants import RepoFile, gguf_variants, quant_of
from app.paths import AppPaths
from app.task import Progress, Stopped, TaskState
from tests.support.hub_server import SLICE_BYTES, FakeHub, add_repo, sha256
from tests.support.service import free_port

FAST = RetryPolicy(attempts=4, first_wait_s=0.01)
MB = 1 << 20


def fetch(hub: FakeHub, repo_id: str, filename: str, cache_dir: Path, state: TaskState | None = None) -> Path:
    remote = resolve(repo_id, filename, endpoint=hub.url, token=None)
    [path] = download_files([remote], cache_dir, state or TaskState(), token=None, endpoint=hub.url, retry=FAST)
    return path


def test_quantizations_are_read_from_file_names_and_split_files_grouped() -> None:
    assert [quant_of(n) for n in ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "m.IQ4_XS.gguf", "qwen-bf16.gguf")] == [
        "Q4_K_M",
        "IQ4_XS",
        "BF16",
    ]
    assert quant_of("Qwen3-30B-UD-Q4_K_XL-00001-of-00002.gguf") == "UD-Q4_K_XL"
    assert quant_of("model.gguf") is None
    files = [
        RepoFile("README.md", 10),
        RepoFile("mmproj-model-f16.gguf", 5),
        RepoFile("Q8_0/big-Q8_0-00002-of-00003.gguf", 30),
        RepoFile("Q8_0/big-Q8_0-00001-of-00003.gguf", 30),
        RepoFile("Q8_0/big-Q8_0-00003-of-00003.gguf", 10),
        RepoFile("big-Q4_K_M.gguf", 40),
        RepoFile("big-F16-00001-of-00002.gguf", 90),
    ]
    variants = {v.name: v for v in gguf_variants(files)}
    assert set(variants) == {"Q8_0", "Q4_K_M", "F16"}
    q8 = variants["Q8_0"]
    assert [f.path for f in q8.files] == [f"Q8_0/big-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert q8.size == 70 and q8.complete
    assert not variants["F16"].complete  # one part of two


def test_model_page_lists_files_license_gated_and_variants(hub: FakeHub, gguf_slice: bytes) -> None:
    files = {"m-Q4_K_M-00001-of-00002.gguf": gguf_slice, "m-Q4_K_M-00002-of-00002.gguf": gguf_slice[:2000]}
    add_repo(hub, "org/m-GGUF", files | {"m-Q8_0.gguf": gguf_slice, "README.md": b"hi"}, gated="manual", license="mit")
    details = model_details("org/m-GGUF", endpoint=hub.url, token=None)
    assert details.gated and details.license == "mit"
    assert {f.path: f.size for f in details.files}["README.md"] == 2
    assert {f.path: f.sha256 for f in details.files}["m-Q8_0.gguf"] == sha256(gguf_slice)
    q4 = next(v for v in details.variants if v.name == "Q4_K_M")
    assert len(q4.files) == 2 and q4.size == SLICE_BYTES + 2000


def test_a_hub_that_takes_the_connection_and_never_answers_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub waits for an answer forever unless told otherwise: the Discover page's search never ended."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    monkeypatch.setattr(hub_api, "ANSWER_TIMEOUT_S", 0.2)  # huggingface_hub retries 5 times, 23 s of pauses
    outcome: list[BaseException] = []

    def search() -> None:
        try:
            search_models("qwen", endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}", token=None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=search, daemon=True)
    worker.start()
    worker.join(timeout=90)
    silent.close()
    assert not worker.is_alive(), "the search still waits for the Hub"
    assert len(outcome) == 1 and isinstance(outcome[0], HubError) and "network error" in str(outcome[0])


def test_search_results_come_back_sorted(hub: FakeHub, gguf_slice: bytes) -> None:
    add_repo(hub, "a/llama-GGUF", {"x.gguf": b"1"}, downloads=10, likes=300, last_modified="2026-03-01T00:00:00Z")
    add_repo(hub, "b/llama-GGUF", {"x.gguf": b"1"}, downloads=500, likes=2, last_modified="2026-01-01T00:00:00Z")
    add_repo(hub, "c/llama-GGUF", {"x.gguf": b"1"}, downloads=70, likes=40, last_modified="2026-05-01T00:00:00Z")
    add_repo(hub, "d/llama-st", {"x.bin": b"1"}, downloads=900, tags=("safetensors", "text-generation"))
    ids = {
        sort: [m.id for m in search_models("llama", endpoint=hub.url, token=None, sort=sort)]
        for sort in ("downloads", "likes", "recent")
    }
    assert ids == {
        "downloads": ["b/llama-GGUF", "c/llama-GGUF", "a/llama-GGUF"],
        "likes": ["a/llama-GGUF", "c/llama-GGUF", "b/llama-GGUF"],
        "recent": ["c/llama-GGUF", "a/llama-GGUF", "b/llama-GGUF"],
    }
    assert [m.id for m in search_models("llama", endpoint=hub.url, token=None, limit=1)] == ["b/llama-GGUF"]


def test_dropped_connection_is_resumed_with_a_range_request(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    add_repo(hub, "org/m", {"m-Q4_0.gguf": gguf_slice})
    hub.faults.drop_after, hub.faults.drop_times = MB, 2
    path = fetch(hub, "org/m", "m-Q4_0.gguf", cache_dir)
    assert [r.range for r in hub.downloads("m-Q4_0.gguf")] == [None, f"bytes={MB}-", f"bytes={2 * MB}-"]
    assert hub.bytes_sent("m-Q4_0.gguf") == SLICE_BYTES
    assert sha256(path.read_bytes()) == sha256(gguf_slice)
    cache = RepoCache(cache_dir, "org/m")
    assert path.is_symlink() and path.resolve() == cache.blob(sha256(gguf_slice))
    assert cache.ref("main").read_text() == hub.repos["org/m"].commit
    assert not cache.incomplete(sha256(gguf_slice)).exists()


def test_a_server_that_ignores_range_still_gives_the_right_file(
    hub: FakeHub, gguf_slice: bytes, cache_dir: Path
) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    hub.faults.drop_after, hub.faults.ignore_range = MB, True
    path = fetch(hub, "org/m", "m.gguf", cache_dir)
    assert len(hub.downloads("m.gguf")) == 2
    assert sha256(path.read_bytes()) == sha256(gguf_slice)


def test_small_plain_git_files_are_checked_by_their_git_hash(hub: FakeHub, cache_dir: Path) -> None:
    add_repo(hub, "org/m", {"config.json": b'{"a": 1}'})
    assert fetch(hub, "org/m", "config.json", cache_dir).read_bytes() == b'{"a": 1}'


def test_429_is_retried_after_retry_after(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    hub.faults.too_many_times, hub.faults.retry_after_s = 1, 1
    started = time.monotonic()
    path = fetch(hub, "org/m", "m.gguf", cache_dir)
    assert time.monotonic() - started >= 1.0
    assert [r.status for r in hub.requests_for("m.gguf")] == [429, 302, 200]
    assert path.read_bytes() == gguf_slice


def test_pause_keeps_the_partial_and_cancel_deletes_it(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    partial = RepoCache(cache_dir, "org/m").incomplete(sha256(gguf_slice))
    pausing = TaskState(lambda p: pausing.pause() if p.done else None, interval_s=0)
    with pytest.raises(Stopped, match="resume"):
        fetch(hub, "org/m", "m.gguf", cache_dir, pausing)
    kept = partial.stat().st_size
    assert 0 < kept < SLICE_BYTES
    cancelling = TaskState(lambda p: cancelling.cancel() if p.done > kept else None, interval_s=0)
    with pytest.raises(Stopped, match="cancelled"):
        fetch(hub, "org/m", "m.gguf", cache_dir, cancelling)
    assert hub.downloads("m.gguf")[-1].range == f"bytes={kept}-"
    assert not partial.exists()


def test_progress_is_throttled_and_carries_rate_and_eta() -> None:
    now = [0.0]
    events: list[Progress] = []
    state = TaskState(events.append, interval_s=0.25, clock=lambda: now[0])
    state.begin(total=1000)
    for _ in range(100):  # 10 bytes every 10 ms: 1000 bytes/s for one second
        now[0] += 0.01
        state.advance(10)
    state.finish()
    assert 4 <= len(events) <= 6
    assert events[-1].finished and events[-1].done == 1000 and events[-1].eta_s == 0
    middle = events[1]
    assert middle.rate_bps == pytest.approx(1000, rel=0.05)
    assert middle.eta_s == pytest.approx((1000 - middle.done) / 1000, rel=0.05)


def test_corrupt_byte_is_caught_and_nothing_is_registered(
    hub: FakeHub, gguf_bytes: bytes, cache_dir: Path, paths: AppPaths
) -> None:
    add_repo(hub, "org/smol-GGUF", {"smol-Q4_1.gguf": gguf_bytes})
    hub.faults.corrupt_offset = 5_000_000
    with pytest.raises(HubError, match="corrupted and has been deleted") as caught:
        pull(PullRequest.parse("org/smol-GGUF"), paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir)
    assert sha256(gguf_bytes) in str(caught.value)
    cache = RepoCache(cache_dir, "org/smol-GGUF")
    assert not cache.blob(sha256(gguf_bytes)).exists() and not cache.incomplete(sha256(gguf_bytes)).exists()
    assert load_pulled(paths) == []
    assert all(spec.source != "hub" for spec in known_models(paths).values())
    hub.faults.corrupt_offset = None
    pulled = pull(
        PullRequest.parse("org/smol-GGUF"), paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir
    )
    assert [r.range for r in hub.downloads("smol-Q4_1.gguf")] == [None, None]  # fetched again, from the start
    assert sha256(pulled.path.read_bytes()) == sha256(gguf_bytes)
    assert [m.id for m in load_pulled(paths)] == [pulled.id]


def test_pull_registers_a_verified_model_with_a_stable_id(
    hub: FakeHub, gguf_bytes: bytes, cache_dir: Path, paths: AppPaths
) -> None:
    add_repo(hub, "org/smol-GGUF", {"SmolLM2-135M-Instruct.Q4_1.gguf": gguf_bytes, "README.md": b"x"})
    request = PullRequest.parse("org/smol-GGUF:q4_1")
    first = pull(request, paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir)
    # The bundled model already has the id the file name gives, so the pulled one gets its own.
    assert first.id == "smollm2-135m-instruct.q4_1"
    again = pull(request, paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir)
    assert again.id == first.id and len(load_pulled(paths)) == 1
    assert len(hub.downloads("SmolLM2-135M-Instruct.Q4_1.gguf")) == 1  # the second pull found the blob
    spec = known_models(paths)[first.id]
    assert spec.source == "hub" and spec.size_bytes == len(gguf_bytes) and spec.path == first.path


def test_not_enough_disk_is_refused_before_any_byte(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    remote = resolve("org/m", "m.gguf", endpoint=hub.url, token=None)
    with pytest.raises(HubError, match=f"needs {SLICE_BYTES:,} bytes .* more and 1,000 bytes .* are free"):
        download_files([remote], cache_dir, TaskState(), token=None, endpoint=hub.url, free_bytes=lambda _: 1000)
    assert hub.downloads("m.gguf") == []
    assert not (cache_dir / "models--org--m" / "blobs").exists()


def test_gated_repo_says_where_to_accept_the_license(
    hub: FakeHub, gguf_bytes: bytes, cache_dir: Path, paths: AppPaths, caplog: pytest.LogCaptureFixture
) -> None:
    add_repo(hub, "org/gated-GGUF", {"g-Q4_1.gguf": gguf_bytes}, gated="manual")
    hub.faults.token = "hf_right_" + "x" * 20
    request = PullRequest.parse("org/gated-GGUF")
    page = f"{hub.url}/org/gated-GGUF"
    for token in (None, "hf_wrong"):
        with pytest.raises(HubError, match=f"accept the license at {page}, then retry"):
            pull(request, paths, TaskState(), endpoint=hub.url, token=token, cache_dir=cache_dir)
    caplog.set_level(logging.DEBUG)
    model = pull(request, paths, TaskState(), endpoint=hub.url, token=hub.faults.token, cache_dir=cache_dir)
    assert model.path.read_bytes() == gguf_bytes
    resolved = [r for r in hub.requests_for("g-Q4_1.gguf") if "/resolve/" in r.path]
    assert resolved and all(r.authorized for r in resolved)
    # The bytes come from the CDN, another origin: the token must not follow the redirect there.
    assert [r.authorization for r in hub.downloads("g-Q4_1.gguf")] == [None]
    assert hub.faults.token not in caplog.text


def test_missing_repo_and_file_are_named(hub: FakeHub, gguf_slice: bytes) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    with pytest.raises(HubError, match="org/nothing-here was not found on the Hub"):
        model_details("org/nothing-here", endpoint=hub.url, token=None)
    with pytest.raises(HubError, match="org/nothing-here was not found, or it is private"):
        resolve("org/nothing-here", "m.gguf", endpoint=hub.url, token=None)
    with pytest.raises(HubError, match="that file is not in org/m"):
        resolve("org/m", "other.gguf", endpoint=hub.url, token=None)


def test_offline_says_so_plainly(gguf_slice: bytes, paths: AppPaths, cache_dir: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(OfflineError, match=OFFLINE_MESSAGE):
        search_models("llama", endpoint=nowhere, token=None)
    with pytest.raises(OfflineError, match=OFFLINE_MESSAGE):
        pull(PullRequest.parse("org/m"), paths, TaskState(), endpoint=nowhere, token=None, cache_dir=cache_dir)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("name", ["../evil.gguf", "/etc/passwd", "a/../../b.gguf", "C:\\x.gguf", "a//b", ""])
def test_file_names_that_leave_the_folder_are_refused(name: str) -> None:
    with pytest.raises(UnsafeName):
        check_filename(name)


def test_a_hub_file_name_with_dots_is_refused_before_download(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    add_repo(hub, "org/evil", {"../../escape-Q4_0.gguf": gguf_slice})
    with pytest.raises(UnsafeName):
        pull(PullRequest.parse("org/evil"), AppPaths(*(cache_dir,) * 5), TaskState(), endpoint=hub.url, token=None,
             cache_dir=cache_dir)  # fmt: skip
    assert hub.downloads("escape-Q4_0.gguf") == []
    with pytest.raises(UnsafeName):
        PullRequest.parse("org/m/../../x.gguf")


def test_several_files_share_one_progress_total(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    parts = {"m-Q8_0-00001-of-00002.gguf": gguf_slice, "m-Q8_0-00002-of-00002.gguf": gguf_slice[::-1]}
    add_repo(hub, "org/m", parts)
    remote = [resolve("org/m", name, endpoint=hub.url, token=None) for name in parts]
    events: list[Progress] = []
    paths = download_files(remote, cache_dir, TaskState(events.append), token=None, endpoint=hub.url, retry=FAST)
    assert [p.name for p in paths] == list(parts)
    assert [p.read_bytes() for p in paths] == list(parts.values())
    assert {e.total for e in events} == {2 * SLICE_BYTES}
    assert events[-1].finished and events[-1].done == 2 * SLICE_BYTES


def test_cancel_during_a_backoff_deletes_the_partial(hub: FakeHub, gguf_slice: bytes, cache_dir: Path) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    hub.faults.drop_after, hub.faults.drop_times = MB, 1
    state = TaskState()
    slow = RetryPolicy(first_wait_s=30)
    remote = resolve("org/m", "m.gguf", endpoint=hub.url, token=None)
    threading.Timer(0.5, state.cancel).start()
    started = time.monotonic()
    with pytest.raises(Stopped, match="cancelled"):
        download_files([remote], cache_dir, state, token=None, endpoint=hub.url, retry=slow)
    assert time.monotonic() - started < 10  # the 30 s backoff was cut short
    assert not RepoCache(cache_dir, "org/m").incomplete(sha256(gguf_slice)).exists()


def test_a_repo_with_several_variants_asks_which() -> None:
    files = (RepoFile("m-Q4_K_M.gguf", 4_000_000_000), RepoFile("m-Q8_0.gguf", 8_000_000_000))
    details = ModelDetails("org/m", None, False, None, files, tuple(gguf_variants(list(files))))
    with pytest.raises(HubError, match=r"2 variants: Q4_K_M \(4.00 GB\), Q8_0 \(8.00 GB\); .* pull org/m:Q4_K_M"):
        choose_variant(PullRequest.parse("org/m"), details)
    with pytest.raises(HubError, match="org/m has no Q2_K"):
        choose_variant(PullRequest.parse("org/m:Q2_K"), details)
    assert choose_variant(PullRequest.parse("org/m/m-Q8_0.gguf"), details).name == "Q8_0"
    assert choose_variant(PullRequest.parse("org/m:q8_0"), details).name == "Q8_0"


@pytest.mark.parametrize(
    ("status", "code", "has_token", "says"),
    [
        (401, "GatedRepo", False, "is gated: save a Hugging Face token with `modeldeck hf-token set`, accept the"),
        (403, "GatedRepo", True, "your Hugging Face token has no access yet: accept the license at"),
        (401, None, False, "was not found, or it is private"),
        (401, None, True, "the Hub refused your Hugging Face token: save a valid one"),
        (403, None, True, "your Hugging Face token may not read org/m: check its permissions"),
        (404, "RepoNotFound", False, "org/m was not found on the Hub"),
        (404, "EntryNotFound", False, "that file is not in org/m"),
        (429, None, False, "the Hub is limiting requests (429): wait a minute, then retry"),
        (503, None, False, "the Hub answered 503; it may be down for a moment, retry later"),
    ],
)
def test_every_refusal_becomes_a_message_to_act_on(status: int, code: str | None, has_token: bool, says: str) -> None:
    from app.hub.errors import for_status

    error = for_status(status, "https://hub.example", "org/m", has_token, code, "7")
    assert says in str(error)
    assert error.retryable == (status in (429, 503))
    if status == 429:
        assert error.retry_after_s == 7.0


def test_429_past_every_retry_says_so_and_keeps_nothing_broken(
    hub: FakeHub, gguf_slice: bytes, cache_dir: Path
) -> None:
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    hub.faults.too_many_times, hub.faults.retry_after_s = 10, 0
    with pytest.raises(HubError, match=r"limiting requests \(429\).*gave up after 4 tries, run the pull again"):
        fetch(hub, "org/m", "m.gguf", cache_dir)
    hub.faults.too_many_times = 0
    assert fetch(hub, "org/m", "m.gguf", cache_dir).read_bytes() == gguf_slice


def test_a_link_planted_where_the_partial_belongs_is_never_written_through(
    hub: FakeHub, gguf_slice: bytes, cache_dir: Path, tmp_path: Path
) -> None:
    """Whoever can write in the cache could point the partial at a file of the user's: the download must refuse,
    and the file it points at keep its bytes."""
    add_repo(hub, "org/m", {"m.gguf": gguf_slice})
    victim = tmp_path / "precious.txt"
    victim.write_bytes(b"the user's own words\n")
    partial = RepoCache(cache_dir, "org/m").incomplete(sha256(gguf_slice))
    partial.parent.mkdir(parents=True)
    partial.symlink_to(victim)
    with pytest.raises(HubError, match="symbolic link"):
        fetch(hub, "org/m", "m.gguf", cache_dir)
    assert victim.read_bytes() == b"the user's own words\n"
    assert hub.downloads("m.gguf") == []


def test_the_partial_is_opened_without_following_a_link(tmp_path: Path) -> None:
    """The check above runs before each attempt; a link planted between it and the open is refused by O_NOFOLLOW."""
    victim = tmp_path / "precious.txt"
    victim.write_bytes(b"kept")
    link = tmp_path / "blob.incomplete"
    link.symlink_to(victim)
    for have in (0, 2):
        with pytest.raises(OSError, match="symbolic links"):
            _open_partial(link, have)
    assert victim.read_bytes() == b"kept"

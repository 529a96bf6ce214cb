"""Safetensors pulls for vLLM: shards, config and tokenizer in the Hugging Face cache layout, each file verified,
the folder registered as a vLLM model. The Hub is the local stand-in (tests/support/hub_server.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from app.hub.cache import RepoCache
from app.hub.download import RetryPolicy, download_files, resolve
from app.hub.errors import HubError
from app.hub.library import known_models
from app.hub.pull import PullRequest, pull
from app.hub.pulled import load_pulled
from app.hub.variants import SAFETENSORS, RepoFile, safetensors_variant
from app.paths import AppPaths
from app.service.control.library_ops import delete_files, verify
from app.task import Progress, TaskState
from tests.support.hub_server import FakeHub, add_repo, git_blob_sha1, sha256

REPO_ID = "org/tiny-llama"
FAST = RetryPolicy(attempts=4, first_wait_s=0.01)


def shard(tensors: dict[str, int]) -> bytes:
    """A real safetensors file: a JSON header, then `n` float32 values per tensor."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, n in tensors.items():
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [offset, offset + 4 * n]}
        offset += 4 * n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(range(256)) * (offset // 256) + bytes(offset % 256)


def model_files() -> dict[str, bytes]:
    first, second = shard({"embed": 150_000}), shard({"lm_head": 100_000, "norm": 64})
    index = {"weight_map": {"embed": "model-00001-of-00002.safetensors", "lm_head": "model-00002-of-00002.safetensors"}}
    return {
        "model-00001-of-00002.safetensors": first,
        "model-00002-of-00002.safetensors": second,
        "model.safetensors.index.json": json.dumps(index).encode(),
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}).encode(),
        "generation_config.json": b'{"temperature": 0.7}',
        "tokenizer.json": json.dumps({"model": {"vocab": {f"t{i}": i for i in range(400)}}}).encode(),  # LFS-sized
        "tokenizer_config.json": b'{"chat_template": "{{ messages }}"}',
        "special_tokens_map.json": b'{"eos_token": "</s>"}',
        "pytorch_model.bin": b"pickle, never fetched" * 100,
        "README.md": b"# tiny",
        "onnx/model.onnx": b"x" * 2000,
    }


WANTED = sorted(n for n in model_files() if n not in ("pytorch_model.bin", "README.md", "onnx/model.onnx"))


def pull_safetensors(hub: FakeHub, paths: AppPaths, cache_dir: Path, state: TaskState | None = None) -> object:
    return pull(
        PullRequest.parse(REPO_ID), paths, state or TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir
    )


def test_the_safetensors_variant_is_weights_config_and_tokenizer_only() -> None:
    files = [RepoFile(name, len(data)) for name, data in model_files().items()]
    variant = safetensors_variant(files)
    assert variant is not None and variant.name == SAFETENSORS and variant.complete
    assert sorted(f.path for f in variant.files) == WANTED
    missing_shard = [f for f in files if f.path != "model-00002-of-00002.safetensors"]
    assert not safetensors_variant(missing_shard).complete  # type: ignore[union-attr]
    assert safetensors_variant([f for f in files if f.path != "config.json"]) is None
    assert safetensors_variant([RepoFile("config.json", 2), RepoFile("sub/model.safetensors", 9)]) is None


def test_pull_fetches_every_file_verified_and_registers_a_vllm_folder(
    hub: FakeHub, paths: AppPaths, cache_dir: Path
) -> None:
    files = model_files()
    add_repo(hub, REPO_ID, files, tags=("safetensors", "text-generation"))
    events: list[Progress] = []
    model = pull_safetensors(hub, paths, cache_dir, TaskState(events.append, interval_s=0))
    [pulled] = load_pulled(paths)
    assert pulled == model and pulled.format == SAFETENSORS and pulled.variant == SAFETENSORS
    folder = pulled.path
    assert folder.is_dir() and folder.parent.name == "snapshots"
    assert sorted(p.name for p in folder.iterdir()) == WANTED
    cache = RepoCache(cache_dir, REPO_ID)
    for name in WANTED:
        data = files[name]
        assert (folder / name).read_bytes() == data
        # LFS files are stored under their sha256, small git files under their git blob hash, as HF does.
        expected = sha256(data) if len(data) >= 1024 else git_blob_sha1(data)
        assert (folder / name).resolve() == cache.blob(expected)
    assert hub.requests_for("pytorch_model.bin") == [] and hub.requests_for("README.md") == []
    assert pulled.size_bytes == sum(len(files[n]) for n in WANTED)
    spec = known_models(paths)[pulled.id]
    assert spec.engine == "vllm" and spec.path == folder and spec.source == "hub" and pulled.id == "tiny-llama"
    # Every file's hash was checked, with progress, before anything was registered.
    hashed = {e.current for e in events if e.phase == "verify"}
    assert hashed == set(WANTED)
    assert all(e.checked <= e.check_total for e in events if e.phase == "verify")
    verdict = verify(spec, pulled)
    assert verdict.ok, verdict.checks
    assert any("config.json: git hash matches" in c for c in verdict.checks)
    assert any("model-00001-of-00002.safetensors: sha256 matches" in c for c in verdict.checks)


def test_a_damaged_file_in_the_folder_fails_verify_and_delete_removes_the_folder(
    hub: FakeHub, paths: AppPaths, cache_dir: Path
) -> None:
    add_repo(hub, REPO_ID, model_files())
    pull_safetensors(hub, paths, cache_dir)
    [pulled] = load_pulled(paths)
    spec = known_models(paths)[pulled.id]
    config = (pulled.path / "config.json").resolve()
    config.write_bytes(b'{"architectures": ["Evil"], "hidden_size": 64}')
    verdict = verify(spec, pulled)
    assert not verdict.ok and any("config.json is damaged" in c for c in verdict.checks)
    delete_files(spec, paths)
    assert load_pulled(paths) == [] and not pulled.path.exists()
    assert not any((cache_dir / "models--org--tiny-llama" / "blobs").iterdir())


def test_a_corrupted_small_file_is_caught_by_its_git_hash_and_nothing_is_registered(
    hub: FakeHub, paths: AppPaths, cache_dir: Path
) -> None:
    add_repo(hub, REPO_ID, model_files())
    hub.faults.corrupt_offset = 3  # every file served has its fourth byte flipped
    with pytest.raises(HubError, match="corrupted and has been deleted"):
        pull_safetensors(hub, paths, cache_dir)
    assert load_pulled(paths) == [] and all(s.source != "hub" for s in known_models(paths).values())
    hub.faults.corrupt_offset = None
    pull_safetensors(hub, paths, cache_dir)
    assert [m.format for m in load_pulled(paths)] == [SAFETENSORS]


def model_files_with_a_bad_shard() -> dict[str, bytes]:
    """The model's files, its second shard's header pointing `lm_head` past the end of the file."""
    files = model_files()
    bad = bytearray(files["model-00002-of-00002.safetensors"])
    length = struct.unpack("<Q", bad[:8])[0]
    header = json.loads(bad[8 : 8 + length])
    header["lm_head"]["data_offsets"] = [0, 10**12]
    raw = json.dumps(header).encode()
    files["model-00002-of-00002.safetensors"] = struct.pack("<Q", len(raw)) + raw + bytes(bad[8 + length :])
    return files


def test_a_shard_whose_header_points_outside_the_file_is_not_registered(
    hub: FakeHub, paths: AppPaths, cache_dir: Path
) -> None:
    add_repo(hub, REPO_ID, model_files_with_a_bad_shard())
    with pytest.raises(HubError, match=r"not a model vLLM can serve.*lm_head"):
        pull_safetensors(hub, paths, cache_dir)
    assert load_pulled(paths) == []


def test_a_repo_with_gguf_and_safetensors_names_both_and_takes_either(
    hub: FakeHub, gguf_slice: bytes, paths: AppPaths, cache_dir: Path
) -> None:
    add_repo(hub, REPO_ID, model_files() | {"tiny-Q4_0.gguf": gguf_slice, "tiny-Q8_0.gguf": gguf_slice})
    with pytest.raises(HubError, match=r"3 variants: .*safetensors \("):
        pull_safetensors(hub, paths, cache_dir)
    request = PullRequest.parse(f"{REPO_ID}:safetensors")
    model = pull(request, paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir)
    assert model.format == SAFETENSORS and hub.requests_for("tiny-Q4_0.gguf") == []


def test_verification_reports_progress_and_can_be_cancelled(hub: FakeHub, cache_dir: Path) -> None:
    data = shard({"w": 1_000_000})  # 4 MB: four hashing steps of 1 MiB
    add_repo(hub, REPO_ID, {"model.safetensors": data})
    remote = resolve(REPO_ID, "model.safetensors", endpoint=hub.url, token=None)
    events: list[Progress] = []
    state = TaskState(events.append, interval_s=0)
    download_files([remote], cache_dir, state, token=None, endpoint=hub.url, retry=FAST)
    checked = [e.checked for e in events if e.phase == "verify"]
    assert checked[0] == 0 and checked[-1] == len(data) and checked == sorted(checked) and len(checked) >= 4
    assert events[-1].finished and events[-1].phase == "download"

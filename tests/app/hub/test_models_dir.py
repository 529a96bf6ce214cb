"""Pulls into a models folder the user chose (plain files, not the Hugging Face cache), and the library scanning it.
The Hub is the local stand-in (tests/support/hub_server.py); every file is real."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.hub.errors import HubError
from app.hub.library import known_models, local_models
from app.hub.pull import PullRequest, pull
from app.hub.pulled import PulledModel, load_pulled
from app.hub.stores import PARTIAL_DIR
from app.paths import AppPaths
from app.service.control.library_ops import verify
from app.task import TaskState
from tests.app.hub.test_hub_safetensors import WANTED, model_files, model_files_with_a_bad_shard
from tests.support.hub_server import SLICE_BYTES, FakeHub, add_repo
from tests.support.service import start_service_process, stop_service_process


def pull_into(hub: FakeHub, spec: str, paths: AppPaths, models_dir: Path, cache_dir: Path) -> PulledModel:
    request = PullRequest.parse(spec)
    return pull(request, paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir, models_dir=models_dir)


def test_a_split_gguf_lands_as_plain_files_and_is_listed_once(
    hub: FakeHub, gguf_bytes: bytes, paths: AppPaths, cache_dir: Path
) -> None:
    # Each part of a split GGUF is a GGUF of its own; the bundled model stands in for both.
    parts = {f"Q4_1/smol-Q4_1-0000{n}-of-00002.gguf": gguf_bytes for n in (1, 2)}
    add_repo(hub, "org/smol-GGUF", parts)
    models_dir = paths.models_dir  # ModelDeck's own folder, which the library scans anyway
    model = pull_into(hub, "org/smol-GGUF:Q4_1", paths, models_dir, cache_dir)
    first, second = models_dir / "smol-Q4_1-00001-of-00002.gguf", models_dir / "smol-Q4_1-00002-of-00002.gguf"
    assert first.read_bytes() == second.read_bytes() == gguf_bytes
    assert not first.is_symlink() and model.path == first and model.hashes and len(model.hashes) == 2
    assert not cache_dir.exists()  # nothing went to the Hugging Face cache
    assert not any((models_dir / PARTIAL_DIR).glob("*.incomplete"))
    # Scanned alone, the folder shows the split model once, by its first part, with the size of both.
    [local] = local_models(models_dir)
    assert local.path == first and local.size_bytes == 2 * len(gguf_bytes) and local.id == "smol-q4_1"
    # With the pull's record, the library lists it once, as the pull.
    listed = [spec for spec in known_models(paths).values() if spec.path == first]
    assert [(spec.id, spec.source) for spec in listed] == [(model.id, "hub")] and model.id == "smol-q4_1"
    verdict = verify(listed[0], model)
    assert verdict.ok and sum("sha256 matches" in check for check in verdict.checks) == 2
    # A part missing (a pull cancelled or paused between parts): no engine could load it, so it is not listed.
    second.unlink()
    assert local_models(models_dir) == []


def test_a_safetensors_model_gets_its_own_subfolder(hub: FakeHub, paths: AppPaths, tmp_path: Path) -> None:
    add_repo(hub, "org/tiny-llama", model_files())
    mine = tmp_path / "my-models"
    model = pull_into(hub, "org/tiny-llama", paths, mine, tmp_path / "hf-cache")
    folder = mine / "org--tiny-llama"
    assert model.path == folder and sorted(p.name for p in folder.iterdir()) == WANTED
    [local] = local_models(mine)
    assert local.engine == "vllm" and local.path == folder
    assert verify(local, None).ok
    assert verify(known_models(paths)[model.id], model).ok


def test_an_other_file_of_the_same_name_is_never_overwritten(
    hub: FakeHub, gguf_bytes: bytes, paths: AppPaths, tmp_path: Path
) -> None:
    add_repo(hub, "org/m", {"m-Q4_0.gguf": gguf_bytes})
    mine = tmp_path / "my-models"
    mine.mkdir()
    (mine / "m-Q4_0.gguf").write_bytes(b"somebody else's file")
    with pytest.raises(HubError, match=r"already exists and is not the Hub's m-Q4_0\.gguf"):
        pull_into(hub, "org/m", paths, mine, tmp_path / "hf-cache")
    assert (mine / "m-Q4_0.gguf").read_bytes() == b"somebody else's file" and load_pulled(paths) == []
    assert hub.downloads("m-Q4_0.gguf") == []
    (mine / "m-Q4_0.gguf").unlink()
    pull_into(hub, "org/m", paths, mine, tmp_path / "hf-cache")
    pull_into(hub, "org/m", paths, mine, tmp_path / "hf-cache")  # the same file again: hashed, kept, not fetched
    assert len(hub.downloads("m-Q4_0.gguf")) == 1 and (mine / "m-Q4_0.gguf").read_bytes() == gguf_bytes


def test_a_file_of_the_same_name_that_arrives_during_the_download_is_kept(
    hub: FakeHub, gguf_bytes: bytes, paths: AppPaths, tmp_path: Path
) -> None:
    """Another repo's file of the same name can land in the folder while this one downloads (two pulls at once): it
    is not replaced, and this download is kept for a pull after the name is free."""
    add_repo(hub, "org/m", {"m-Q4_0.gguf": gguf_bytes})
    mine = tmp_path / "my-models"
    other = mine / "m-Q4_0.gguf"
    hub.faults.before_last_chunk = lambda _name: other.write_bytes(b"another repo's m-Q4_0.gguf")
    with pytest.raises(HubError, match=r"already exists and is not the Hub's m-Q4_0\.gguf"):
        pull_into(hub, "org/m", paths, mine, tmp_path / "hf-cache")
    assert other.read_bytes() == b"another repo's m-Q4_0.gguf" and load_pulled(paths) == []
    hub.faults.before_last_chunk = None
    other.unlink()
    pull_into(hub, "org/m", paths, mine, tmp_path / "hf-cache")
    assert other.read_bytes() == gguf_bytes and len(hub.downloads("m-Q4_0.gguf")) == 1  # not fetched again
    assert not any((mine / PARTIAL_DIR).glob("*.incomplete"))


def test_a_file_no_engine_can_read_is_not_left_in_the_folder(
    hub: FakeHub, gguf_slice: bytes, paths: AppPaths, tmp_path: Path
) -> None:
    add_repo(hub, "org/m", {"m-Q4_0.gguf": gguf_slice})  # the first 3 MB of a GGUF: its tensors run past the end
    mine = tmp_path / "my-models"
    with pytest.raises(HubError, match="not a usable GGUF"):
        pull_into(hub, "org/m", paths, mine, tmp_path / "hf-cache")
    assert local_models(mine) == [] and load_pulled(paths) == []
    assert hub.bytes_sent("m-Q4_0.gguf") == SLICE_BYTES


def test_a_pull_that_fails_its_model_check_takes_back_only_the_files_it_placed(
    hub: FakeHub, gguf_slice: bytes, paths: AppPaths, tmp_path: Path
) -> None:
    """A split GGUF whose first part no engine can read: the part the pull placed goes; the second part, arrived
    whole under its name while the first downloaded (the same bytes, as another pull of it places them), is not
    this pull's to delete. No second pull can stage that here: to place the second part it must first pass the
    same-named first one, which fails its own check or this pull's, so the test writes the bytes itself."""
    first, second = (f"m-Q4_0-0000{n}-of-00002.gguf" for n in (1, 2))
    parts = {first: gguf_slice, second: gguf_slice[:500_000]}
    add_repo(hub, "org/m", parts)
    mine = tmp_path / "my-models"

    def second_part_arrives(name: str) -> None:
        if name == first:
            (mine / second).write_bytes(parts[second])

    hub.faults.before_last_chunk = second_part_arrives
    with pytest.raises(HubError, match="not a usable GGUF"):
        pull_into(hub, "org/m:Q4_0", paths, mine, tmp_path / "hf-cache")
    assert not (mine / first).exists() and (mine / second).read_bytes() == parts[second]
    assert hub.downloads(second) == [] and load_pulled(paths) == []


def test_a_safetensors_pull_that_fails_its_model_check_leaves_no_folder_it_made(
    hub: FakeHub, paths: AppPaths, tmp_path: Path
) -> None:
    """Its files go, and its subfolder with them when the pull made it; an empty one that was there stays."""
    add_repo(hub, "org/tiny-llama", model_files_with_a_bad_shard())
    mine = tmp_path / "my-models"
    folder = mine / "org--tiny-llama"
    for there_before in (False, True):
        if there_before:
            folder.mkdir()
        with pytest.raises(HubError, match="not a model vLLM can serve"):
            pull_into(hub, "org/tiny-llama", paths, mine, tmp_path / "hf-cache")
        assert folder.exists() is there_before and not (there_before and any(folder.iterdir()))
        assert local_models(mine) == [] and load_pulled(paths) == []


def test_serve_models_dir_lists_and_serves_the_folders_models(
    bundled_gguf: Path, paths: AppPaths, tmp_path: Path
) -> None:
    mine = tmp_path / "my-models"
    (mine / "org--tiny").mkdir(parents=True)
    shutil.copyfile(bundled_gguf, mine / "Copy-Of-Smol.Q4_1.gguf")
    (mine / "org--tiny" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (mine / "org--tiny" / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    (mine / "notes.txt").write_text("not a model")
    service = start_service_process(paths, tmp_path, "--models-dir", str(mine), "--model", "copy-of-smol.q4_1")
    try:
        models = {m["id"]: m for m in service.client.models()}
        assert models["copy-of-smol.q4_1"]["state"] == "ready", service.output()
        assert "org--tiny" in models and "notes" not in " ".join(models)
        chat = service.openai_client().chat.completions.create(
            model="copy-of-smol.q4_1", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
        )
        assert chat.choices[0].message.content
    finally:
        stop_service_process(service)

"""The local library: the bundled model through package metadata, and GGUF files in the models directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.hub.library import BUNDLED_ID, known_models, model_id_from_filename
from app.paths import AppPaths
from app.service.control.library_ops import COPY_BLOCK, _copy
from app.task import Stopped, TaskState


def test_bundled_model_is_listed(paths: AppPaths, bundled_gguf: Path) -> None:
    spec = known_models(paths)[BUNDLED_ID]
    assert spec.path == bundled_gguf and spec.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert spec.size_bytes == bundled_gguf.stat().st_size > 90_000_000
    assert spec.source == "bundled"


def test_models_directory_is_scanned_safely(paths: AppPaths, tmp_path: Path) -> None:
    paths.models_dir.mkdir(parents=True)
    (paths.models_dir / "My Model Q4_K_M.gguf").write_bytes(b"GGUF")
    outside = tmp_path / "outside.gguf"
    outside.write_bytes(b"GGUF")
    (paths.models_dir / "link.gguf").symlink_to(outside)
    (paths.models_dir / "notes.txt").write_text("not a model")
    models = known_models(paths)
    assert "my-model-q4_k_m" in models
    assert "link" not in models, "a link out of the models directory was followed"
    assert set(models) == {"my-model-q4_k_m", BUNDLED_ID}


def test_model_ids_are_safe() -> None:
    assert model_id_from_filename("../../etc/passwd.gguf") == "etc-passwd"
    assert model_id_from_filename("...gguf") is None
    assert model_id_from_filename("Llama-3.1-8B.Q4_K_M.gguf") == "llama-3.1-8b.q4_k_m"


def test_a_folder_of_the_users_lists_split_ggufs_once_and_safetensors_folders(paths: AppPaths, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / ".modeldeck-partial").mkdir(parents=True)
    (mine / ".modeldeck-partial" / "x.gguf").write_bytes(b"GGUF")  # a partial is not a model
    for n in (1, 2, 3):
        (mine / f"big-Q8_0-0000{n}-of-00003.gguf").write_bytes(b"G" * n)
    (mine / "org--llama").mkdir()
    (mine / "org--llama" / "config.json").write_text("{}")
    (mine / "org--llama" / "model.safetensors").write_bytes(b"S" * 10)
    (mine / "no-weights").mkdir()
    (mine / "no-weights" / "config.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("{}")
    (elsewhere / "model.safetensors").write_bytes(b"S")
    (mine / "linked").symlink_to(elsewhere)
    assert "big-q8_0" not in known_models(paths)  # only the folders asked for are scanned
    models = known_models(paths, (mine,))
    assert set(models) == {"big-q8_0", "org--llama", BUNDLED_ID}
    big, llama = models["big-q8_0"], models["org--llama"]
    assert (
        big.path == mine / "big-Q8_0-00001-of-00003.gguf" and big.size_bytes == 6 and big.engine == "llama-cpp-python"
    )
    assert llama.path == mine / "org--llama" and llama.engine == "vllm" and llama.size_bytes == 12


@pytest.mark.parametrize("in_kernel", [True, False], ids=["sendfile", "through-python"])
def test_an_import_copies_whole_and_a_cancelled_one_stops_after_a_block(tmp_path: Path, in_kernel: bool) -> None:
    source = tmp_path / "source.gguf"
    source.write_bytes(b"GGUF" + bytes(range(256)) * 1000)
    with source.open("r+b") as grown:
        grown.seek(2 * COPY_BLOCK + 7)
        grown.write(b"tail")  # three blocks, the last one short
    _copy(source, tmp_path / "whole", None, in_kernel)
    assert (tmp_path / "whole").read_bytes() == source.read_bytes()
    state = TaskState()
    state.cancel()
    with pytest.raises(Stopped):
        _copy(source, tmp_path / "stopped", state, in_kernel)
    assert (tmp_path / "stopped").stat().st_size == COPY_BLOCK

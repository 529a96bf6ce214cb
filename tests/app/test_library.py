"""The local library: the bundled model through package metadata, and GGUF files in the models directory."""

from __future__ import annotations

from pathlib import Path

from app.hub.library import BUNDLED_ID, known_models, model_id_from_filename
from app.paths import AppPaths


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

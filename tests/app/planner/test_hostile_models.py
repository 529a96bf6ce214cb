"""Model files whose counts no model has, where a user meets them: `modeldeck import`, a model folder's config.json,
and a model the service is asked to start. Each is refused with the field named, and nothing is sized by it."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.paths import AppPaths
from app.planner.facts import ImplausibleConfig, facts_from_hf_config
from app.planner.plans import NoVariants, safetensors_variant
from tests.engines.gguf_builder import U32, gguf_bytes, llama_metadata
from tests.support.service import REPO, start_service_process, stop_service_process

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 1000,
    "max_position_embeddings": 2048, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_import_refuses_a_gguf_with_a_zero_sized_dimension(tmp_path: Path, paths: AppPaths) -> None:
    source = tmp_path / "Empty-Q8_0.gguf"
    source.write_bytes(gguf_bytes(llama_metadata(), dims=(64, 0)))
    result = subprocess.run(
        [sys.executable, "-m", "app", "import", str(source)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "not imported" in result.stderr.lower() and "'token_embd.weight' dimension 1 is 0" in result.stderr
    assert not paths.models_dir.exists() or not any(paths.models_dir.iterdir())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_hidden_layers", 2**31),  # `(kv,) * layers`: a 16 GiB tuple
        ("num_key_value_heads", 2**63),
        ("num_attention_heads", -4),
        ("hidden_size", 2**40),
        ("vocab_size", 10**30),
        ("max_position_embeddings", 2**62),
        ("head_dim", 2**32),
        ("intermediate_size", 2**32),
    ],
)
def test_config_counts_no_model_has_are_refused_naming_the_key(key: str, value: int) -> None:
    with pytest.raises(ImplausibleConfig, match=f"config.json: {key} is {value}, outside the plausible range"):
        facts_from_hf_config({**CONFIG, key: value}, {"BF16": 1000})


def test_config_counts_of_other_types_are_unknown_not_used() -> None:
    """Some configs hold one intermediate size a layer in a list; a string or a float is no count either."""
    config: dict[str, Any] = {**CONFIG, "intermediate_size": [128, 256], "vocab_size": "1000", "num_hidden_layers": 2.0}
    facts = facts_from_hf_config(config, {"BF16": 1000})
    assert (facts.feed_forward_length, facts.vocab_size, facts.layers, facts.kv_heads) == (None, None, None, None)
    assert facts.attention_heads == 4 and facts.trained_context == 2048


def test_a_model_folder_with_a_bomb_in_its_config_cannot_be_planned(tmp_path: Path) -> None:
    folder = tmp_path / "bomb"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**CONFIG, "num_hidden_layers": 2**31}))
    with pytest.raises(NoVariants, match=r"bomb: config.json: num_hidden_layers is 2147483648"):
        safetensors_variant(folder)
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(NoVariants, match=r"no readable config\.json \(RecursionError"):
        safetensors_variant(folder)


def test_starting_a_model_that_claims_two_billion_layers_fails_clearly(paths: AppPaths, tmp_path: Path) -> None:
    paths.models_dir.mkdir(parents=True)
    (paths.models_dir / "bomb-model.gguf").write_bytes(gguf_bytes(llama_metadata(block_count=(U32, 2**31))))
    service = start_service_process(paths, tmp_path, "--model", "bomb-model")
    try:
        model = service.model("bomb-model")
        assert model["state"] == "failed"
        assert "llama.block_count is 2147483648, outside the plausible range" in model["message"]
        assert service.client.health()["status"] == "ok"
    finally:
        stop_service_process(service)


def shard(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (shard(b'{"w": {"dtype": "BF16", "shape": [18446744073709551615, 2], "data_offsets": [0, 0]}}'),
         "tensor 'w' has a dimension of 18446744073709551615"),
        (shard(b'{"w": {"dtype": "BF16", "shape": [-1], "data_offsets": [0, 0]}}'), "has a dimension of -1"),
        (shard(b'{"w": {"dtype": "BF16", "shape": "64", "data_offsets": [0, 0]}}'), "tensor 'w' has no dtype and"),
        (shard(b'{"w": {"shape": [64]}}'), "tensor 'w' has no dtype and shape"),
        (shard(b'{"w": [1, 2]}'), "tensor 'w' has no dtype and shape"),
        (shard(b'{"w": {"dtype": "F32", "shape": [' + b"1," * 9 + b'1]}}'), "of at most 8 dims"),
        (shard(b"[" * 100_000 + b"]" * 100_000), "not readable JSON (RecursionError)"),
        (shard(b"[1, 2]"), "not a JSON object"),
        (b"\x01\x02", "not a safetensors file"),
    ],
)  # fmt: skip
def test_safetensors_headers_with_implausible_tensors_are_refused(tmp_path: Path, content: bytes, problem: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(content)
    with pytest.raises(NoVariants) as refused:
        safetensors_variant(folder)
    assert problem in str(refused.value) and "model.safetensors" in str(refused.value)

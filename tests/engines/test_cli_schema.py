"""The command-line schemas in tests/fixtures/engine_cli/ and their checker, tests/engines/cli_schema.py, which the
engine command tests (tests/engines/test_engine_commands.py) and the export tests (tests/app/export/test_export.py) use:
each schema says where it came from, the checker finds each kind of mistake, and an extracted schema is what its
extractor makes of the pinned wheel (rerun where the wheel is at hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.cli_schema import SCHEMAS, check_command, load_schema

ENGINES = {"vllm": "vllm-0.34.0.json", "sglang": "sglang-0.5.23.json", "tgi": "tgi-launcher.json",
           "trtllm": "trtllm-serve.json", "ray": "ray-2.60.0-start.json"}  # fmt: skip
VLLM = load_schema(ENGINES["vllm"])


def test_the_vllm_schema_has_provenance_and_the_flags_vllm_serve_takes() -> None:
    provenance = VLLM["provenance"]
    assert VLLM["version"] == "0.34.0" and provenance["wheel"].startswith("vllm-0.34.0-")
    assert len(provenance["wheel_sha256"]) == 64 and "vllm/engine/arg_utils.py" in provenance["source_files"]
    options = VLLM["options"]
    assert len(options) > 250
    assert options["--dtype"]["choices"] == ["auto", "bfloat16", "float", "float16", "float32", "half"]
    assert options["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert options["--gpu-memory-utilization"]["bounds"] == {"gt": 0, "le": 1}
    assert options["--enable-prefix-caching"]["kind"] == "boolean_optional"
    assert "ray" in options["--distributed-executor-backend"]["metavar_choices"]
    assert VLLM["positionals"][0]["name"] == "model_tag"


def test_every_schema_says_where_it_came_from() -> None:
    for engine, name in ENGINES.items():
        schema = load_schema(name)
        assert schema["engine"] == engine and schema["command"] and schema["options"], name
        provenance = schema["provenance"]
        assert provenance["obtained_with"], name
        if "wheel" in provenance:  # extracted: the wheel, its digest and the digest of every file read
            assert len(provenance["wheel_sha256"]) == 64 and provenance["source_files"], name
            assert provenance["extractor"].startswith("tests/fixtures/engine_cli/extract_"), name
            assert provenance["wheel"].startswith(f"{engine}-{schema['version']}-"), name
        else:  # transcribed: the repository, the commit and the file
            assert len(provenance["commit"]) == 40 and provenance["repository"] and provenance["file"], name
        for flag, option in schema["options"].items():
            assert flag.startswith("--") and option["kind"] and option["dest"], (name, flag)


@pytest.mark.parametrize(
    ("engine", "args", "problem"),
    [
        ("vllm", ["m", "--tensor-parallel-sise", "2"], "unknown flag --tensor-parallel-sise"),
        ("vllm", ["m", "--dtype", "bf16"], "not one of"),
        ("vllm", ["m", "--max-num-seqs", "many"], "not a valid int"),
        ("vllm", ["m", "--gpu-memory-utilization", "1.5"], "must be le 1"),
        ("vllm", ["m", "--tensor-parallel-size", "0"], "must be ge 1"),
        ("vllm", ["m", "--max-model-len"], "needs a value"),
        ("vllm", ["m", "--enable-prefix-caching=yes"], "takes no value"),
        ("vllm", ["m", "--quantization", "awq4"], "not one of"),
        ("vllm", ["m", "extra"], "unexpected argument"),
        (
            "vllm",
            ["m", "--enable-prefix-caching", "--no-enable-prefix-caching"],
            "--no-enable-prefix-caching given twice",
        ),
        ("sglang", ["--model-path"], "--model-path needs a value"),
        ("sglang", ["--tensor-parallel-degree", "2"], "unknown flag --tensor-parallel-degree"),
        ("sglang", ["--dtype", "fp16"], "--dtype 'fp16': not one of"),
        ("sglang", ["--enable-metrics=true"], "--enable-metrics takes no value"),
        ("sglang", ["--tp-size", "two"], "--tp-size 'two': not a valid int"),
        ("sglang", ["--context-length", "lots"], "--context-length 'lots': not an integer"),
        ("sglang", ["--tp-size", "2", "--tensor-parallel-size", "4"], "--tensor-parallel-size given twice"),
        ("sglang", ["--port", "1", "--port", "2"], "--port given twice"),
        ("sglang", ["m"], "unexpected argument 'm'"),
        ("tgi", ["--num-shard"], "--num-shard needs a value"),
        ("tgi", ["--quantize", "int3"], "--quantize 'int3': not one of"),
        ("trtllm", ["--port", "1"], "missing positional model"),
        ("trtllm", ["m", "--backend", "onnx"], "--backend 'onnx': not one of"),
    ],
)
def test_the_checker_finds_each_kind_of_mistake(engine: str, args: list[str], problem: str) -> None:
    found = check_command(load_schema(ENGINES[engine]), args)
    assert any(problem in p for p in found), found


def test_the_schemas_know_negatable_optional_and_many_valued_flags() -> None:
    assert check_command(VLLM, ["m", "--no-enable-prefix-caching", "--enforce-eager"]) == []
    assert check_command(VLLM, ["m", "--dtype", "fp16"])[0].startswith("--dtype 'fp16': not one of")
    assert check_command(VLLM, ["m", "--tensor-parallel", "2"])[0] == "unknown flag --tensor-parallel"
    sglang = load_schema(ENGINES["sglang"])
    assert check_command(sglang, ["--no-enable-tf32-matmul", "--model-checksum", "--lora-paths", "a", "b"]) == []


@pytest.mark.parametrize(
    ("wheels", "script", "schema"),
    [("/tmp/vllm-wheel/vllm-0.34.0-*.whl", "extract_vllm.py", "vllm-0.34.0.json"),
     ("/tmp/ray-wheel/ray-2.60.0-*.whl", "extract_ray.py", "ray-2.60.0-start.json"),
     ("/tmp/sglang-wheel/sglang-0.5.23-*.whl", "extract_sglang.py", "sglang-0.5.23.json")],
)  # fmt: skip
def test_the_schema_file_is_what_the_extractor_makes_of_the_wheel(wheels: str, script: str, schema: str) -> None:
    """Run the extractor again where the pinned wheel is at hand (240, 80 and 39 MB downloads, so only then)."""
    found = sorted(Path(wheels).parent.glob(Path(wheels).name))
    if not found:
        pytest.skip(f"no {wheels} (see the extractor's docstring for the pip download)")
    made = subprocess.run(
        [sys.executable, str(SCHEMAS / script), str(found[0])], capture_output=True, text=True, check=True
    )
    assert json.loads(made.stdout) == load_schema(schema)

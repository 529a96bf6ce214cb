"""llama-server's adapter: its commands checked against the real command-line schema of the pinned version
(tests/fixtures/engine_cli/llama-server.json, extracted from that build's own `--help`), and where it is found."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engines.base import SPIN_COUNT, LaunchPlan
from engines.llama_server import LlamaServerEngine, find_executable, installed_builds
from engines.metrics import METRICS_CONFIGS, MetricTranslator

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "engine_cli" / "llama-server.json"
MODEL = Path("/models/smollm2.gguf")
PLANS = {
    "cpu, one slot": LaunchPlan("smol", MODEL, context_length=4096, threads=2),
    "cpu, four slots": LaunchPlan("smol", MODEL, context_length=8192, threads=8, batch_size=256, parallel=4),
    "full offload": LaunchPlan("big", MODEL, context_length=32768, threads=16, gpu_layers=81, parallel=16),
    "partial offload, chat template": LaunchPlan(
        "mid", MODEL, context_length=2048, threads=4, gpu_layers=12, chat_format="chatml", parallel=2
    ),
    "unknown threads, too many slots": LaunchPlan("x", MODEL, context_length=512, threads=0, parallel=500),
    "a draft model": LaunchPlan(
        "big",
        MODEL,
        context_length=4096,
        threads=4,
        gpu_layers=81,
        draft_path=Path("/models/small.gguf"),
        draft_model="small",
        draft_max=12,
        draft_gpu_layers=30,
    ),
}


def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return data


def _options() -> dict[str, dict[str, Any]]:
    return {name: option for option in _schema()["options"] for name in option["names"]}


def check_against_schema(argv: tuple[str, ...]) -> dict[str, str | None]:
    """Parse argv as llama-server would: every flag known, values where the flag takes one, choices respected, whole
    numbers where the placeholder is N. Returns each option's canonical (last long) name and its value."""
    options = _options()
    parsed: dict[str, str | None] = {}
    args = list(argv[1:])
    while args:
        flag = args.pop(0)
        assert flag in options, f"llama-server has no option {flag}"
        option = options[flag]
        value = None
        if option["value"] is not None:
            assert args, f"{flag} needs a value ({option['value']})"
            value = args.pop(0)
            if option["choices"]:
                assert value in option["choices"], f"{flag} {value}: not one of {option['choices']}"
            if option["value"] == "N":
                int(value)
        name = option["names"][-1] if option["names"][-1].startswith("--") else flag
        assert name not in parsed, f"{flag} given twice"
        parsed[name] = value
    return parsed


def test_the_schema_says_where_it_came_from() -> None:
    provenance = _schema()["provenance"]
    assert provenance["engine"] == "llama-server"
    assert "0.3.36" in provenance["built_from"] and provenance["version"].startswith("0.")
    assert "--help" in provenance["extracted_with"]
    assert len(_schema()["options"]) > 200


@pytest.mark.parametrize("name", PLANS)
def test_commands_fit_the_real_schema(name: str) -> None:
    plan = PLANS[name]
    command = LlamaServerEngine(configured=Path("/opt/llama/llama-server")).build_command(plan, 8123, "sekret")
    parsed = check_against_schema(command.argv)
    options = _options()
    assert parsed[options["-m"]["names"][-1]] == str(MODEL)
    assert parsed["--host"] == "127.0.0.1" and parsed["--port"] == "8123"
    assert parsed["--fit"] == "off"
    assert parsed["--n-gpu-layers"] == str(plan.gpu_layers)
    assert parsed["--ctx-size"] == str(plan.context_length)
    assert parsed["--parallel"] == str(min(plan.parallel, 64))
    assert "--no-kv-unified" in parsed  # the canonical name of the -kvu group: its switch is present
    assert "--kv-unified" in command.argv and "--metrics" in parsed and "--no-webui" in command.argv
    assert ("--threads" in parsed) == (plan.threads > 0)
    assert parsed.get("--chat-template") == plan.chat_format
    assert parsed["--alias"] == plan.model_id
    if plan.draft_path is None:
        assert not any(flag.startswith("--spec") for flag in parsed), parsed
    else:  # the pinned build drafts only when --spec-type says how
        named = {flag: parsed[options[flag]["names"][-1]] for flag in ("-md", "--spec-type", "-ngld")}
        assert named == {
            "-md": str(plan.draft_path),
            "--spec-type": "draft-simple",
            "-ngld": str(plan.draft_gpu_layers),
        }
        assert parsed["--spec-draft-n-max"] == str(plan.draft_max)


@pytest.mark.parametrize("name", PLANS)
def test_embedding_commands_fit_the_real_schema(name: str) -> None:
    """The embedding companion: the same model and placement, embeddings only, mean-pooled, one slot, and a batch
    as large as its context (llama-server embeds an input in one physical batch)."""
    plan = PLANS[name]
    command = LlamaServerEngine(configured=Path("/opt/llama/llama-server")).embedding_command(plan, 8124, "sekret")
    parsed = check_against_schema(command.argv)
    assert "--embeddings" in parsed and parsed["--pooling"] == "mean" and parsed["--parallel"] == "1"
    assert parsed["--ctx-size"] == parsed["--batch-size"] == parsed["--ubatch-size"] == str(plan.context_length)
    assert parsed["--n-gpu-layers"] == str(plan.gpu_layers) and parsed["--port"] == "8124"
    assert parsed["--host"] == "127.0.0.1" and parsed["--alias"] == plan.model_id
    assert not {"--metrics", "--chat-template", "--jinja"} & set(command.argv)  # no chat in embedding mode
    assert command.env["LLAMA_API_KEY"] == "sekret" and "sekret" not in command.argv
    assert command.ready_path == "/health"


def test_the_key_travels_in_the_environment_variable_llama_server_reads() -> None:
    command = LlamaServerEngine().build_command(PLANS["cpu, one slot"], 8123, "sekret")
    assert "sekret" not in " ".join(command.argv)
    api_key_env = _options()["--api-key"]["env"]
    assert api_key_env == "LLAMA_API_KEY" and command.env[api_key_env] == "sekret"
    # Changed with the engine defaults: passive waits unless the plan found the cores free (engines.base).
    assert command.env["OMP_WAIT_POLICY"] == "passive"
    spinning = LlamaServerEngine().build_command(replace(PLANS["cpu, one slot"], spin_wait=True), 8123, "sekret")
    assert "OMP_WAIT_POLICY" not in spinning.env and spinning.env["LLAMA_API_KEY"] == "sekret"
    assert spinning.env["GOMP_SPINCOUNT"] == str(SPIN_COUNT)  # bounded: the runtime's own spin collapses when busy
    idle_env = _options()["--cache-idle-slots"]["env"]  # the pinned build's name for it
    assert command.env[idle_env] == "false"  # idle slots keep their KV for the gateway's slot routing
    assert command.secrets == ("sekret",)
    assert command.ready_path == "/health"


def test_the_metrics_table_reads_names_llama_server_exposes() -> None:
    """A llama-server exposition as this version writes it (names taken from a real scrape of the test build)."""
    text = "\n".join([
        "# TYPE llamacpp:prompt_tokens_total counter", "llamacpp:prompt_tokens_total 100",
        "llamacpp:tokens_predicted_total 50", "llamacpp:requests_processing 3", "llamacpp:requests_deferred 1",
        "llamacpp:predicted_tokens_seconds 12.5",
    ])  # fmt: skip
    translator = MetricTranslator(METRICS_CONFIGS["llama-server"])
    assert translator.translate(text, 10.0) == {"requests_running": 3.0, "requests_waiting": 1.0}
    later = text.replace("_total 100", "_total 300").replace("predicted_total 50", "predicted_total 90")
    assert translator.translate(later, 12.0) == {
        "requests_running": 3.0, "requests_waiting": 1.0, "prompt_tokens_per_s": 100.0,
        "generation_tokens_per_s": 20.0,
    }  # fmt: skip
    speculating = later + (
        "\nllamacpp:spec_decode_num_draft_tokens_total 40\nllamacpp:spec_decode_num_accepted_tokens_total 30\n"
    )
    assert translator.translate(speculating, 14.0)["draft_acceptance"] == 0.75  # since the engine started
    none_drafted = (
        later + "\nllamacpp:spec_decode_num_draft_tokens_total 0\nllamacpp:spec_decode_num_accepted_tokens_total 0"
    )
    assert "draft_acceptance" not in translator.translate(none_drafted, 16.0)


def _fake_build(root: Path, version: str, *, info: bool = True) -> Path:
    directory = root / f"llama-server-{version}-cpu"
    directory.mkdir(parents=True)
    executable = directory / "llama-server"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    if info:
        (directory / "build-info.json").write_text(json.dumps({"llama_cpp_python": version, "backend": "cpu"}))
    return executable


def test_builds_are_found_newest_first_and_need_their_build_info(tmp_path: Path) -> None:
    older = _fake_build(tmp_path, "0.3.9")
    newer = _fake_build(tmp_path, "0.3.36")
    _fake_build(tmp_path, "0.4.0", info=False)  # an interrupted build: no build-info.json
    builds = installed_builds(tmp_path)
    assert [b.executable for b in builds] == [newer, older]
    assert builds[0].version == "0.3.36" and builds[0].backend == "cpu"
    assert installed_builds(tmp_path / "absent") == []


def test_a_build_info_nested_too_deeply_is_no_build_info(tmp_path: Path) -> None:
    """json.loads raised RecursionError on it, which neither the listing nor the offload check caught."""
    executable = _fake_build(tmp_path, "0.3.36", info=False)
    (executable.parent / "build-info.json").write_text("[" * 100_000)
    assert installed_builds(tmp_path) == []
    assert LlamaServerEngine(configured=executable).gpu_offload()  # as for a llama-server of unknown make


def test_a_configured_path_wins_and_a_wrong_one_is_not_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = _fake_build(tmp_path / "builds", "0.3.36")
    on_path = _fake_build(tmp_path / "bin", "0.0.1")
    monkeypatch.setenv("PATH", f"{on_path.parent}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("llama-server") == str(on_path)
    assert find_executable(None, [tmp_path / "builds"]) == build
    assert find_executable(None, [tmp_path / "empty"]) == on_path
    assert find_executable(on_path, [tmp_path / "builds"]) == on_path
    assert find_executable(tmp_path / "nowhere" / "llama-server", [tmp_path / "builds"]) is None
    missing = LlamaServerEngine(configured=tmp_path / "nowhere" / "llama-server").detect()
    assert not missing.installed and "not at" in missing.detail


def test_the_pinned_build_reports_its_version(llama_server_binary: Path) -> None:
    """The real build that installers/test.sh made: detect() runs `--version` and reads it."""
    installation = LlamaServerEngine(configured=llama_server_binary).detect()
    assert installation.installed, installation.detail
    assert installation.version == _schema()["provenance"]["version"]


def test_the_stored_schema_is_what_the_pinned_build_says(llama_server_binary: Path) -> None:
    """Re-extract from the build installers/test.sh made: the stored schema must not drift from its binary."""
    spec = importlib.util.spec_from_file_location(
        "extract_llama_server", SCHEMA_PATH.parent / "extract_llama_server.py"
    )
    assert spec is not None and spec.loader is not None
    extractor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extractor)
    help_text = subprocess.run([str(llama_server_binary), "--help"], capture_output=True, text=True, check=True,
                               timeout=30).stdout  # fmt: skip
    assert extractor.parse_help(help_text) == _schema()["options"]

"""Detection of SGLang, TGI and TensorRT-LLM from what their installations put on PATH. The executables are
shell scripts in a temporary bin directory that answer the version questions as the real ones do: this tests
detection only, nothing is launched."""

from __future__ import annotations

from pathlib import Path

from engines.base import LaunchPlan
from engines.sglang import SGLangEngine
from engines.tgi import TGIEngine
from engines.trtllm import TRTLLMEngine

PLAN = LaunchPlan("m", Path("/models/m"), 4096, 0, model_ref="org/m")


def script(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def fake_python(bin_dir: Path, versions: dict[str, str]) -> Path:
    """A `python` that answers `-I -c "...m.version('<dist>')..."` like importlib.metadata would."""
    cases = "".join(f"  *\\'{dist}\\'*) echo {version} ;;\n" for dist, version in versions.items())
    body = f'case "$3" in\n{cases}  *) echo "PackageNotFoundError" >&2; exit 1 ;;\nesac'
    return script(bin_dir, "python", body)


def test_nothing_installed(tmp_path: Path) -> None:
    empty = str(tmp_path)
    for engine in (SGLangEngine(path=empty), TGIEngine(path=empty), TRTLLMEngine(path=empty)):
        found = engine.detect()
        assert not found.installed and found.version is None
        assert "not installed" in found.detail
    assert "pip install sglang" in SGLangEngine(path=empty).detect().detail


def test_sglang_found_through_its_console_script(tmp_path: Path) -> None:
    bin_dir = tmp_path / "sglang-env" / "bin"
    script(bin_dir, "sglang", "exit 0")
    python = fake_python(bin_dir, {"sglang": "0.5.23"})
    engine = SGLangEngine(path=str(bin_dir))
    found = engine.detect()
    assert (found.installed, found.version) == (True, "0.5.23")
    command = engine.build_command(PLAN, 1234, "key")
    assert command.argv[:3] == (str(python), "-m", "sglang.launch_server")  # the environment's own interpreter


def test_sglang_script_without_the_package_is_not_installed(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    script(bin_dir, "sglang", "exit 0")
    fake_python(bin_dir, {})
    found = SGLangEngine(path=str(bin_dir)).detect()
    assert not found.installed and "has no sglang package" in found.detail


def test_tgi_version_from_the_launcher(tmp_path: Path) -> None:
    launcher = script(tmp_path, "text-generation-launcher", 'echo "text-generation-launcher 3.3.4"')
    found = TGIEngine(path=str(tmp_path)).detect()
    assert (found.installed, found.version) == (True, "3.3.4")
    assert str(launcher) in found.detail
    script(tmp_path, "text-generation-launcher", "echo broken >&2; exit 2")
    assert not TGIEngine(path=str(tmp_path)).detect().installed


def test_trtllm_found_with_and_without_its_version(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    serve = script(bin_dir, "trtllm-serve", "exit 0")
    found = TRTLLMEngine(path=str(bin_dir)).detect()
    assert (found.installed, found.version) == (True, None)  # no python beside it: version unknown
    fake_python(bin_dir, {"tensorrt_llm": "1.2.1"})
    found = TRTLLMEngine(path=str(bin_dir)).detect()
    assert (found.installed, found.version) == (True, "1.2.1")
    assert TRTLLMEngine(path=str(bin_dir)).build_command(PLAN, 1234, "key").argv[0] == str(serve)

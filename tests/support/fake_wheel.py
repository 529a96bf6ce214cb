"""A tiny real wheel named like an engine, built in a test, so that installers run pip for real offline.

It is a stand-in for the engine's own multi-gigabyte CUDA wheel: only its name, version and a console script that
prints a version line are the engine's. `build_vllm_standin` adds `vllm serve`: a small OpenAI-style server that
checks its command line against vLLM's real schema (tests/support/vllm_standin.py says what it shares with vLLM).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
VLLM_SCHEMA = TESTS / "fixtures" / "engine_cli" / "vllm-0.34.0.json"
# `vllm serve ARGS` runs the stand-in server; anything else prints the version, as `vllm --version` does.
_VLLM_CLI = """import sys


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        from vllm._serve import main as serve

        serve(sys.argv[2:])
    else:
        print({version!r})
"""


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(
    directory: Path,
    name: str,
    version: str,
    script: str,
    prints: str | None = None,
    cli: str | None = None,
    modules: Mapping[str, str] | None = None,
) -> Path:
    """`<name>-<version>-py3-none-any.whl` in `directory`, with a console script `script` that prints `prints`
    (the version by default) and exits 0, or runs `cli` (the source of `<name>/_cli.py`, with a `main()`);
    `modules`: more files of the package, by path inside the wheel."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n',
        f"{name}/_cli.py": cli or f"def main() -> None:\n    print({(prints or version)!r})\n",
        **(modules or {}),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: modeldeck-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{dist_info}/entry_points.txt": f"[console_scripts]\n{script} = {name}._cli:main\n",
    }
    record = "".join(f"{path},{_record_hash(text.encode())},{len(text.encode())}\n" for path, text in files.items())
    files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def build_vllm_standin(directory: Path, version: str = "0.34.0") -> Path:
    """A `vllm` wheel whose `vllm serve` is the stand-in server of tests/support/vllm_standin.py, with the schema
    checker (tests/engines/cli_schema.py) and vLLM 0.34.0's command-line schema beside it."""
    return build_wheel(
        directory, "vllm", version, "vllm",
        cli=_VLLM_CLI.format(version=version),
        modules={
            "vllm/_serve.py": (TESTS / "support" / "vllm_standin.py").read_text(encoding="utf-8"),
            "vllm/cli_schema.py": (TESTS / "engines" / "cli_schema.py").read_text(encoding="utf-8"),
            "vllm/vllm-0.34.0.json": VLLM_SCHEMA.read_text(encoding="utf-8"),
        },
    )  # fmt: skip

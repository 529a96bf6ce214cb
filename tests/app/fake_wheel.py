"""A tiny real wheel named like an engine, built in a test, so that installers run pip for real offline.

It is a stand-in for the engine's own multi-gigabyte CUDA wheel: only its name, version and a console script that
prints a version line are the engine's.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(directory: Path, name: str, version: str, script: str, prints: str | None = None) -> Path:
    """`<name>-<version>-py3-none-any.whl` in `directory`, with a console script `script` that prints `prints`
    (the version by default) and exits 0."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n',
        f"{name}/_cli.py": f"def main() -> None:\n    print({(prints or version)!r})\n",
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

"""llama.cpp's quality tools for the tests: built once from the pinned sdist into the test engines folder (like the
llama-server that installers/test.sh builds there), then found there by every later run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.hub.library import BUNDLED_ID
from app.installs.llama_server_build import PINNED_VERSION
from app.installs.llama_tools_build import ToolsBuild, build_llama_tools, installed_tools
from app.installs.sdist_download import download_sdist
from app.task import TaskState
from tests.support.service import REPO

Q4_0 = f"{BUNDLED_ID}.q4_0"  # SmolLM2-135M-Instruct.Q4_0.gguf in the models folder
Q2_K = f"{BUNDLED_ID}.q2_k"
TOKENS = "512"  # two chunks of 256 tokens: seconds per variant on the bundled model


def modeldeck(*args: str, timeout: float = 600, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """`python -m app ARGS` with this environment and `env_vars`."""
    env = {**os.environ, **env_vars}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=timeout, check=False)  # fmt: skip


def tools_in(root: Path) -> ToolsBuild:
    """The tools under `root`, built there first when they are not (minutes: the sources are compiled)."""
    found = installed_tools(root)
    if found:
        return found[0]
    sdist = download_sdist(Path.home() / ".cache" / "modeldeck" / "sdists", PINNED_VERSION, TaskState())
    return build_llama_tools(sdist, root, TaskState(), backend="cpu")

"""The planner picks llama-server over llama-cpp-python for several users when it is available here, with one slot
per user (at most 64), and says why; `modeldeck recommend` prints it with the real build's command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.hub.library import BUNDLED_ID
from app.installs.available import LLAMA_SERVER_ENV
from app.planner.plans import with_command
from app.planner.recommend import recommend
from engines.llama_server import LlamaServerEngine
from engines.registry import ENGINES
from tests.app.test_planner import FIXTURES, bundled_variants, machine
from tests.conftest import REPO


def test_several_users_get_llama_server_with_a_slot_each(bundled_gguf: Path) -> None:
    result = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), "serve", users=8,
                       llama_server=True)  # fmt: skip
    assert result.best is not None and result.best.engine == "llama-server"
    assert result.best.parameters["parallel"] == 8
    assert "continuous batching serves 8 users at once in 8 parallel slots" in result.best.reasons[0]
    crowd = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), "serve", users=500,
                      llama_server=True)  # fmt: skip
    assert crowd.best is not None and crowd.best.parameters["parallel"] == 64


def test_without_llama_server_several_users_take_turns_and_are_told_how_to_fix_it(bundled_gguf: Path) -> None:
    result = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), "serve", users=8)
    assert result.best is not None and result.best.engine == "llama-cpp-python"
    assert "parallel" not in result.best.parameters
    assert "take turns" in result.best.reasons[0]
    assert "modeldeck engines build llama-server" in result.best.reasons[0]


def test_one_user_keeps_llama_cpp_python_even_with_llama_server_here(bundled_gguf: Path) -> None:
    for use, users in (("chat", None), ("serve", 1)):
        result = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), use, users=users,
                           llama_server=True)  # fmt: skip
        assert result.best is not None and result.best.engine == "llama-cpp-python"


def test_the_command_is_llama_servers_with_the_slots(bundled_gguf: Path) -> None:
    result = recommend(machine("rtx4090_24gb"), bundled_variants(bundled_gguf), "serve", users=6, llama_server=True)
    assert result.best is not None
    engines = {**ENGINES, "llama-server": LlamaServerEngine(configured=Path("/opt/llama/llama-server"))}
    command = with_command(BUNDLED_ID, result.best, engines).command
    assert command[0] == "/opt/llama/llama-server"
    assert command[command.index("--parallel") + 1] == "6"
    assert command[command.index("-ngl") + 1] == "31" and "<port>" in command


def test_recommend_cli_picks_the_built_llama_server(llama_server_binary: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "recommend", BUNDLED_ID, "--use", "serve", "--users", "4",
         "--hardware", str(FIXTURES / "laptop_8core_16gb.json")],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, LLAMA_SERVER_ENV: str(llama_server_binary)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Engine   llama-server" in done.stdout
    assert f"Command  {llama_server_binary} -m" in done.stdout and "--parallel 4" in done.stdout

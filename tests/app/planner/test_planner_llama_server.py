"""The planner picks llama-server over llama-cpp-python when it is available here, with one slot per user (at least
4, at most 64), and says why; without it, llama-cpp-python with a prompt cache sized from the memory plan.
`modeldeck recommend` prints it with the real build's command line."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from app.hub.library import BUNDLED_ID
from app.installs.available import LLAMA_SERVER_ENV
from app.planner.defaults import DEFAULT_SLOTS, PROMPT_CACHE_STATES, prompt_cache_state_bytes
from app.planner.plans import with_command
from app.planner.recommend import recommend
from engines.llama_server import LlamaServerEngine
from engines.registry import ENGINES
from tests.app.planner.test_planner import FIXTURES, bundled_variants, machine
from tests.support.service import REPO


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


def test_one_user_gets_llama_server_too_with_its_default_slots(bundled_gguf: Path) -> None:
    """Changed with the engine defaults: one person's chat and a script of theirs each keep a slot (and its prompt
    cache) instead of evicting each other on llama-cpp-python, so llama-server is chosen wherever it is here."""
    for use, users, clients in (("chat", None, "a chat and a script"), ("serve", 1, "a chat and a script"),
                                ("serve", 2, "2 users")):  # fmt: skip
        result = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), use, users=users,
                           llama_server=True)  # fmt: skip
        assert result.best is not None and result.best.engine == "llama-server"
        assert result.best.parameters["parallel"] == DEFAULT_SLOTS
        assert "prompt_cache" not in result.best.parameters
        assert f"serves {clients} at once in {DEFAULT_SLOTS} parallel slots" in result.best.reasons[0]


def test_without_llama_server_the_prompt_cache_is_sized_from_the_memory_plan(bundled_gguf: Path) -> None:
    """llama-cpp-python keeps the states of PROMPT_CACHE_STATES conversations at full context, counted in the
    memory the plan needs; fewer when only that much is free, none when not one fits."""
    variants = bundled_variants(bundled_gguf)
    roomy = recommend(machine("laptop_8core_16gb"), variants, "chat")
    assert roomy.best is not None and roomy.best.engine == "llama-cpp-python"
    one = prompt_cache_state_bytes(variants[0].facts, roomy.best.context, 512)
    assert one is not None and one > variants[0].facts.kv_bytes_per_token() * roomy.best.context  # type: ignore[operator]
    assert roomy.best.parameters["prompt_cache"] == PROMPT_CACHE_STATES * one
    assert roomy.best.memory.part("prompt_cache").ram == PROMPT_CACHE_STATES * one
    assert not roomy.best.memory.part("prompt_cache").resident_at_load
    assert any(reason.startswith(f"prompt cache {3 * one >> 20} MiB") for reason in roomy.best.reasons)
    without_cache = roomy.best.memory.ram - PROMPT_CACHE_STATES * one
    budget = roomy.budgets["ram"]
    for free_states, expected in ((1.5, 1), (0.5, 0)):
        hw = machine("laptop_8core_16gb")
        hw = replace(hw, ram_available=hw.ram_available - budget + without_cache + int(free_states * one))
        tight = recommend(hw, variants, "chat")
        assert tight.best is not None and tight.best.parameters["prompt_cache"] == expected * one
    assert "prompt cache off" in " ".join(tight.best.reasons)


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

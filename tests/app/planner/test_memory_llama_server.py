"""llama-server's memory model: its parameters (slots, ubatch, unified KV cache, flash attention) and its figures
against resident memory recorded with tests/bench/memory_accuracy.py on the bundled model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.hub.library import BUNDLED_ID
from app.planner.defaults import default_plan
from app.planner.facts import ModelFacts, facts_from_gguf
from app.planner.memory import (
    KV_PAD,
    llama_cpp_memory,
    llama_server_kv_cells,
    llama_server_memory,
    plan_memory,
)
from app.planner.recommend import recommend
from engines.gguf import read_gguf_info
from tests.app.planner.test_planner import bundled_variants, machine

MIB = 2**20


@pytest.fixture
def facts(bundled_gguf: Path) -> ModelFacts:
    return facts_from_gguf(read_gguf_info(bundled_gguf))


def test_kv_cells_are_padded_as_a_whole_or_per_slot() -> None:
    assert llama_server_kv_cells(4096, 4, unified=True) == 4096
    assert llama_server_kv_cells(1000, 1, unified=True) == 1024
    assert llama_server_kv_cells(1000, 4, unified=True) == 1024
    # each slot gets context / slots cells, padded: 250 -> 256 per slot
    assert llama_server_kv_cells(1000, 4, unified=False) == 4 * KV_PAD


def test_slots_cost_an_output_row_and_a_sampler_each_not_more_kv(facts: ModelFacts) -> None:
    one, four = llama_server_memory(facts, 4096), llama_server_memory(facts, 4096, parallel=4)
    # 30 layers x (K + V) x 3 KV heads x 64 dims x 2 bytes (f16) per token, shared by the slots
    assert four.part("kv_cache").ram == one.part("kv_cache").ram == 4096 * 23040
    assert facts.vocab_size is not None
    grows = four.ram - one.ram
    assert grows == 3 * facts.vocab_size * (4 + 4 + 12)  # output buffer, the logits the graph writes, candidates


def test_flash_attention_keeps_compute_from_growing_with_the_scores(facts: ModelFacts) -> None:
    on = [llama_server_memory(facts, c).part("compute").ram for c in (2048, 8192)]
    off = [llama_server_memory(facts, c, flash_attention=False).part("compute").ram for c in (2048, 8192)]
    assert off[1] - off[0] > 4 * (on[1] - on[0])
    assert llama_server_memory(facts, 8192, flash_attention=False).part("workspace").ram > 0
    assert llama_server_memory(facts, 8192).part("workspace").ram == 0


def test_a_larger_ubatch_grows_the_compute_buffer(facts: ModelFacts) -> None:
    small = llama_server_memory(facts, 8192, ubatch=256).part("compute").ram
    large = llama_server_memory(facts, 8192, ubatch=2048).part("compute").ram
    assert large > 4 * small


def test_offloaded_layers_move_to_the_gpu(facts: ModelFacts) -> None:
    memory = llama_server_memory(facts, 4096, gpu_layers=31, gpu_backend="cuda")
    assert memory.part("weights").ram == 0 and memory.part("kv_cache").ram == 0
    assert memory.vram > memory.part("weights").vram > 0 and memory.gpus == 1


def test_each_engine_gets_its_own_model(facts: ModelFacts, bundled_gguf: Path) -> None:
    plan = dataclasses.replace(default_plan(BUNDLED_ID, read_gguf_info(bundled_gguf)), parallel=4)
    server = plan_memory("llama-server", facts, plan)
    assert server == llama_server_memory(facts, plan.context_length, parallel=4)
    assert plan_memory("llama-cpp-python", facts, plan) == llama_cpp_memory(facts, plan.context_length)
    # llama-server has no Python interpreter and writes no logits for a whole batch
    assert server.ram < plan_memory("llama-cpp-python", facts, plan).ram - 100 * MIB


def test_the_llama_server_option_is_costed_with_llama_servers_model(bundled_gguf: Path) -> None:
    result = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), "serve", users=8,
                       llama_server=True)  # fmt: skip
    best = result.best
    assert best is not None and best.engine == "llama-server"
    facts = bundled_variants(bundled_gguf)[0].facts
    # each slot gets the option's context, in one KV cache the slots share: the launch's `-c` is all of them
    assert best.parameters["context"] == best.context * 8
    assert best.memory == llama_server_memory(facts, best.context * 8, parallel=8)

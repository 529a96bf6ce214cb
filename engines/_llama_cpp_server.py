"""llama-cpp-python's OpenAI-compatible server with a prompt cache that counts all it holds.

Run as `python -I _llama_cpp_server.py ARGS...` with the arguments of `python -m llama_cpp.server` (isolated: its
directory holds engines/llama_cpp.py, which would shadow the llama_cpp package).

llama-cpp-python's RAM prompt cache evicts by the size of each llama.cpp state alone, but every entry also keeps
a copy of the logits buffer (up to n_batch x vocabulary float32 values: 100 MB for SmolLM2 at batch 512) and of the
tokens: entries of short conversations pile up far past `--cache_size`. Here an entry counts all three, so
`--cache_size` bounds the memory the cache takes.
"""

from __future__ import annotations

import runpy
from typing import Any

import llama_cpp
from llama_cpp.llama_cache import LlamaRAMCache


def state_bytes(state: Any) -> int:
    """What one cached llama_cpp.LlamaState holds in memory."""
    return int(state.llama_state_size) + int(state.scores.nbytes) + int(state.input_ids.nbytes)


class CountedRAMCache(LlamaRAMCache):
    """LlamaRAMCache whose size is what its entries hold, not only their llama.cpp states."""

    @property
    def cache_size(self) -> int:
        return sum(state_bytes(state) for state in self.cache_state.values())


def main() -> None:
    # The server builds its cache as `llama_cpp.LlamaRAMCache(capacity_bytes=...)` when it loads the model.
    llama_cpp.LlamaRAMCache = CountedRAMCache  # type: ignore[attr-defined]  # re-exported by a star import
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

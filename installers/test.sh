#!/usr/bin/env bash
# Sets up .venv with the test tools and runs every check: lint, formatting, types, import layers, tests.
# Extra arguments go to pytest (for example: installers/test.sh tests/engines -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash installers/setup-env.sh test
export QT_QPA_PLATFORM=offscreen
bin=.venv/bin
echo "==> ruff"
"$bin/ruff" check app engines tests
"$bin/ruff" format --check app engines tests
echo "==> mypy"
"$bin/mypy"
echo "==> import layers"
"$bin/lint-imports"
echo "==> llama-server for the engine tests, llama.cpp's quality tools (llama-perplexity, llama-quantize, llama-imatrix)"
# Built from the pinned llama-cpp-python sdist into one folder that later runs reuse; the tests fail without them.
# Both missing (a new machine): one build of both, ggml compiled once (about 10 minutes on 2 cores, where the two
# builds one after the other took 21). A build that may run AMX code (made before AMX was left out:
# app/installs/llama_server_build.py) is made again.
export MODELDECK_TEST_ENGINES="${MODELDECK_TEST_ENGINES:-$HOME/.cache/modeldeck/test-engines}"
missing="$("$bin/python" -c 'import sys; from pathlib import Path
from app.installs.llama_server_build import uses_amx
from app.installs.llama_tools_build import installed_tools
from engines.llama_server import installed_builds
root = Path(sys.argv[1])
server = [b for b in installed_builds(root) if not uses_amx(b.executable.parent)]
tools = [t for t in installed_tools(root) if not uses_amx(t.folder)]
print(" ".join(name for name, found in (("llama-server", server), ("llama-tools", tools)) if not found))' \
    "$MODELDECK_TEST_ENGINES")"
case "$missing" in
    "llama-server llama-tools") "$bin/python" -m app engines build llama-server --with-tools --dest "$MODELDECK_TEST_ENGINES" --backend cpu ;;
    "") ;;
    *) "$bin/python" -m app engines build "$missing" --dest "$MODELDECK_TEST_ENGINES" --backend cpu ;;
esac
echo "==> packages for the packaging tests"
# installers/build.sh once per change of what goes into a package (the first build compiles the portable llama.cpp:
# about 25 minutes on 2 cores, cached in ~/.cache/modeldeck/build; then a minute or two of PyInstaller). The whole
# suite's run builds them beside the other tests (the compiler waits less on them than they wait on engines), and
# runs the packaging tests when they are built.
inputs="$(git ls-files -z pyproject.toml app engines installers resources | xargs -0 sha256sum | sha256sum | cut -c1-16)"
export MODELDECK_TEST_PACKAGES="${MODELDECK_TEST_PACKAGES_ROOT:-$HOME/.cache/modeldeck/test-packages}/$inputs"
if [ -f "$MODELDECK_TEST_PACKAGES/done" ]; then
    echo "    built already: $MODELDECK_TEST_PACKAGES"
elif [ "$#" -gt 0 ]; then
    bash installers/test-packages.sh
else
    mkdir -p build
    echo "    building beside the tests (log: build/packages.log)"
    # A process group of its own, so that leaving early stops the compilers too.
    setsid bash installers/test-packages.sh > build/packages.log 2>&1 &
    builder=$!
    trap 'kill -- "-$builder" 2>/dev/null || true' EXIT
fi
echo "==> pytest"
if [ -z "${builder:-}" ]; then
    "$bin/python" -m pytest "$@"
    exit
fi
status=0
"$bin/python" -m pytest --ignore=tests/packaging || status=$?
echo "==> packaging tests, once the packages are built"
if ! wait "$builder"; then
    trap - EXIT
    echo "the package build failed; the end of build/packages.log:" >&2
    tail -n 40 build/packages.log >&2
    exit 1
fi
trap - EXIT
"$bin/python" -m pytest tests/packaging || status=$?
exit "$status"

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
# about 25 minutes on 2 cores, cached in ~/.cache/modeldeck/build; then a minute or two of PyInstaller).
inputs="$(git ls-files -z pyproject.toml app engines installers resources | xargs -0 sha256sum | sha256sum | cut -c1-16)"
export MODELDECK_TEST_PACKAGES="${MODELDECK_TEST_PACKAGES_ROOT:-$HOME/.cache/modeldeck/test-packages}/$inputs"
if [ ! -f "$MODELDECK_TEST_PACKAGES/done" ]; then
    bash installers/build.sh
    rm -rf "$MODELDECK_TEST_PACKAGES" && mkdir -p "$MODELDECK_TEST_PACKAGES"
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
    cp "dist/ModelDeck-$version-linux-x86_64.tar.gz" "dist/modeldeck_${version}_amd64.deb" "$MODELDECK_TEST_PACKAGES/"
    touch "$MODELDECK_TEST_PACKAGES/done"
fi
echo "==> pytest"
"$bin/python" -m pytest "$@"

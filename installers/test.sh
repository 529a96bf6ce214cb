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
echo "==> llama-server for the engine tests"
# Built once (about 6 minutes on 2 cores) from the pinned llama-cpp-python sdist; the tests fail without it.
export MODELDECK_TEST_ENGINES="${MODELDECK_TEST_ENGINES:-$HOME/.cache/modeldeck/test-engines}"
# A build that may run AMX code (made before AMX was left out: app/installs/llama_server_build.py) is made again.
if ! "$bin/python" -c 'import sys; from pathlib import Path; from engines.llama_server import installed_builds
from app.installs.llama_server_build import uses_amx
sys.exit(0 if [b for b in installed_builds(Path(sys.argv[1])) if not uses_amx(b.executable.parent)] else 1)' \
        "$MODELDECK_TEST_ENGINES"; then
    "$bin/python" -m app engines build llama-server --dest "$MODELDECK_TEST_ENGINES" --backend cpu
fi
echo "==> llama.cpp's quality tools (llama-perplexity, llama-quantize, llama-imatrix) for the quality tests"
if ! "$bin/python" -c 'import sys; from pathlib import Path; from app.installs.llama_tools_build import installed_tools
from app.installs.llama_server_build import uses_amx
sys.exit(0 if [t for t in installed_tools(Path(sys.argv[1])) if not uses_amx(t.folder)] else 1)' \
        "$MODELDECK_TEST_ENGINES"; then
    "$bin/python" -m app engines build llama-tools --dest "$MODELDECK_TEST_ENGINES" --backend cpu
fi
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

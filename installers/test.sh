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
echo "==> pytest"
"$bin/python" -m pytest "$@"

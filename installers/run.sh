#!/usr/bin/env bash
# Sets up ModelDeck in .venv and runs it.
#   installers/run.sh           opens the window (starts the service on demand)
#   installers/run.sh serve     serves the bundled model headless on http://127.0.0.1:8642/v1
#   installers/run.sh ARGS...   any other `modeldeck` command
set -euo pipefail
cd "$(dirname "$0")/.."
bash installers/setup-env.sh
if [ "${1:-}" = "serve" ] && [[ " $* " != *" --model "* ]]; then
    shift
    exec .venv/bin/modeldeck serve --model smollm2-135m-instruct "$@"
fi
exec .venv/bin/modeldeck "$@"

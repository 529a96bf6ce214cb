#!/usr/bin/env bash
# Builds the packages for the packaging tests into $MODELDECK_TEST_PACKAGES (installers/test.sh sets it and runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
bash installers/build.sh
rm -rf "$MODELDECK_TEST_PACKAGES" && mkdir -p "$MODELDECK_TEST_PACKAGES"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
cp "dist/ModelDeck-$version-linux-x86_64.tar.gz" "dist/modeldeck_${version}_amd64.deb" "$MODELDECK_TEST_PACKAGES/"
touch "$MODELDECK_TEST_PACKAGES/done"

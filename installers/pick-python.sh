# Sourced by setup-env.sh and build.sh: prints the first Python 3.11 or newer ($MODELDECK_PYTHON first).
pick_python() {
    for candidate in "${MODELDECK_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "ModelDeck needs Python 3.11 or newer (set MODELDECK_PYTHON to its path)." >&2
    return 1
}

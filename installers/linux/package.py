"""Linux packaging steps of installers/build.sh that are easier in Python than in shell (run by the build
environment's Python, with the repository on its path):

    package.py qt-libs PLUGIN               checks that the system libraries Qt's xcb plugin loads are installed, so
                                            that PyInstaller can carry them; exit 3 naming the Debian packages if not
    package.py deb APP_DIR VERSION OUT.deb  the .deb: APP_DIR under /opt/modeldeck, /usr/bin/modeldeck, the desktop
                                            entry and icon, Depends on exactly the system libraries it does not carry
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from app.gui.shell.system_libraries import debian_package, missing_libraries

RESOURCES = Path(__file__).resolve().parent.parent.parent / "resources"
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_LDCONFIG = re.compile(r"^\s+(\S+) \(([^)]*)\) => (\S+)$", re.MULTILINE)
_RESOLVED = re.compile(r"^\s*(\S+)\s+=>\s+(\S+)\s+\(0x[0-9a-f]+\)\s*$")
PACKAGE = "modeldeck"


def ldd(path: Path) -> tuple[dict[str, str], list[str]]:
    """What `path` loads: soname -> resolved path, and the sonames the loader cannot find."""
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    resolved = {m[1]: m[2] for line in done.stdout.splitlines() if (m := _RESOLVED.match(line))}
    return resolved, missing_libraries(done.stdout)


def qt_libs(plugin: Path) -> int:
    _resolved, missing = ldd(plugin)
    if missing:
        packages = " ".join(sorted({debian_package(name) for name in missing}))
        print(f"Qt's xcb plugin needs {', '.join(missing)} to be packaged: install them first "
              f"(sudo apt install {packages})", file=sys.stderr)  # fmt: skip
        return 3
    return 0


def _elf_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def system_dependencies(app_dir: Path) -> list[str]:
    """The Debian packages that own each library the app's ELF files need and the app does not carry (one readelf,
    one ldconfig and one dpkg call for the whole tree: ldd per file takes minutes on a few hundred libraries)."""
    carried = {path.name for path in app_dir.rglob("*.so*")}
    dynamic = subprocess.run(["readelf", "-d", "-W", *map(str, _elf_files(app_dir))], capture_output=True, text=True,
                             check=False).stdout  # fmt: skip
    needed = set(_NEEDED.findall(dynamic)) - carried
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    where: dict[str, str] = {}
    for soname, arch, path in _LDCONFIG.findall(cache):
        if "x86-64" in arch:
            where.setdefault(soname, path)
    unknown = sorted(name for name in needed if name not in where)
    if unknown:
        raise SystemExit(f"the app needs {', '.join(unknown)}, which this machine lacks: install them or carry them")
    paths = sorted({where[name] for name in needed})
    owners = subprocess.run(["dpkg", "-S", *paths, *(_other_spelling(p) for p in paths)], capture_output=True,
                            text=True, check=False).stdout  # fmt: skip
    found = {line.split(": ", 1)[1]: line.split(":", 1)[0] for line in owners.splitlines() if ": " in line}
    packages = set()
    for path in paths:
        owner = found.get(path) or found.get(_other_spelling(path))
        if owner is None:
            raise SystemExit(f"no Debian package owns {path}, which the app loads: carry it, or install it from one")
        packages.add(owner)
    return sorted(packages)


def _other_spelling(path: str) -> str:
    """/lib/x.so <-> /usr/lib/x.so: merged-/usr systems record one spelling in dpkg's database."""
    return path.removeprefix("/usr") if path.startswith("/usr/lib/") else "/usr" + path


def deb(app_dir: Path, version: str, out: Path) -> int:
    depends = system_dependencies(app_dir)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        shutil.copytree(app_dir, root / "opt" / PACKAGE, symlinks=True)
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / PACKAGE).symlink_to(f"/opt/{PACKAGE}/modeldeck")
        applications = root / "usr" / "share" / "applications"
        applications.mkdir(parents=True)
        shutil.copy(RESOURCES / "modeldeck.desktop", applications / "modeldeck.desktop")
        for size, name in (("256x256", "modeldeck.png"), ("scalable", "modeldeck.svg")):
            icons = root / "usr" / "share" / "icons" / "hicolor" / size / "apps"
            icons.mkdir(parents=True)
            shutil.copy(RESOURCES / name, icons / name)
        size_kib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()) // 1024
        control = root / "DEBIAN"
        control.mkdir()
        (control / "control").write_text(
            f"Package: {PACKAGE}\nVersion: {version}\nSection: devel\nPriority: optional\nArchitecture: amd64\n"
            f"Maintainer: ModelDeck developers <modeldeck@users.noreply.github.com>\nInstalled-Size: {size_kib}\n"
            f"Depends: {', '.join(depends)}\nHomepage: https://github.com/modeldeck/modeldeck\n"
            "Description: Desktop control center for serving language models locally\n"
            " Download, launch and supervise local language models (llama.cpp, vLLM) behind one\n"
            " OpenAI-compatible endpoint, with live charts of throughput, latency and memory.\n",
            encoding="utf-8",
        )
        for path in [root, *root.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
            elif path.is_file() and not path.is_symlink():
                executable = path.stat().st_mode & stat.S_IXUSR
                path.chmod(0o755 if executable else 0o644)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(out)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    print(f"{out}: Depends: {', '.join(depends)}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "qt-libs":
        return qt_libs(Path(argv[1]))
    if len(argv) == 4 and argv[0] == "deb":
        return deb(Path(argv[1]), argv[2], Path(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))

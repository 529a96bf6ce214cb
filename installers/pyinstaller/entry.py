"""The packaged executable's entry point: `modeldeck` itself, or, for the service's child processes, the module or
script they ask for (a frozen executable takes no `python -m`; see engines/python_entry.py)."""

import multiprocessing
import sys

from engines.python_entry import run_entry_point


def main() -> None:
    multiprocessing.freeze_support()
    if not run_entry_point(sys.argv):
        from app.cli import main as modeldeck

        modeldeck()


if __name__ == "__main__":
    main()

"""Ctrl-C during a benchmark level: the signal's KeyboardInterrupt is raised in whatever callback runs, often a
task of aiohttp's. asyncio.run then raised it, and also logged that task's exception as "never retrieved", with a
traceback on the command's stderr after its one-line message (seen under load in
tests/app/bench/test_bench.py::test_ctrl_c_prints_the_levels_measured_and_saves_no_card; plain asyncio.run logs it
here too). The child here raises it inside such a task, as the signal handler would."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.service import REPO

CHILD = textwrap.dedent(
    """
    import asyncio, gc
    from app.bench.run_load import run_load

    async def level() -> None:
        async def write_bytes() -> None:  # what aiohttp runs beside the request
            raise KeyboardInterrupt
        asyncio.get_running_loop().create_task(write_bytes())
        await asyncio.sleep(5)

    try:
        run_load(level())
    except KeyboardInterrupt:
        print("interrupted once")
    gc.collect()
    """
)


def test_an_interrupt_inside_a_task_of_the_load_is_raised_once_and_not_logged() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.stdout == "interrupted once\n", done.stderr
    assert done.stderr == ""

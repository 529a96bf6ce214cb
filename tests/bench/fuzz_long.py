"""The long fuzz run: 10,000 requests (by default) drawn as tests/app/service/test_fuzz_service.py draws them (the
strategies of tests/support/fuzz_strategies.py, from the route tables of both listeners) to a real service on the
bundled model (llama-cpp-python) and a stand-in --upstream, with the Hub offline. Unlike the test it does not stop at
the first problem: it prints the count of answers by class, the 5xx count first, and then each problem seen (a 5xx
other than a 503 with Retry-After, an error that is no OpenAI-shaped JSON body), and whether the service logged a
traceback.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/fuzz_long.py                  # 10,000 requests
    PYTHONPATH=. .venv/bin/python tests/bench/fuzz_long.py --requests 2000 --seed 7

The exit status is 0 when no problem was seen, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.configuration import set_hypothesis_home_dir

from app.hub.library import BUNDLED_ID
from app.paths import app_paths
from tests.support.fuzz_strategies import (
    FUZZ_TIMEOUT_S,
    STAND_IN,
    FuzzRequest,
    FuzzUpstream,
    Tally,
    fuzz_clients,
    judge,
    real_ids,
    requests,
    send,
)
from tests.support.service import free_port, start_service_process, stop_service_process
from tests.support.standin_http import serving


def run(count: int, chosen_seed: int, home: Path) -> int:
    os.environ["MODELDECK_HOME"] = str(home / "modeldeck-home")
    os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # offline Hub: no network in the fuzz
    tally = Tally()
    with serving(FuzzUpstream) as upstream:
        service = start_service_process(
            app_paths(), home, "--model", BUNDLED_ID, "--upstream", f"{STAND_IN}={upstream}"
        )
        try:
            model_ids, other_ids = real_ids(service)
            clients = fuzz_clients(service)
            started = time.monotonic()

            @seed(chosen_seed)
            @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            @given(request=requests(model_ids, other_ids, {BUNDLED_ID}))
            def fuzz(request: FuzzRequest) -> None:
                try:
                    answer = send(clients, request)
                except httpx.TimeoutException:  # silence is a problem too: said, and the run goes on
                    tally.counts["no answer in time"] += 1
                    tally.problems.append(f"no answer in {FUZZ_TIMEOUT_S:g} s: {request!r}")
                    return
                if answer is not None:
                    judge(request, answer, tally)
                else:
                    tally.counts["not sent (refused by httpx)"] += 1
                if tally.counts["requests"] % 1000 == 0 and answer is not None:
                    print(f"{tally.counts['requests']} requests, {time.monotonic() - started:.0f} s", flush=True)

            fuzz()
            for client in clients.values():
                client.close()
            alive = service.process.poll() is None and service.client.health()["status"] == "ok"
            output = service.output()
        finally:
            stop_service_process(service)
    print(f"fuzz_long: {tally.summary()}")
    print(f"in {time.monotonic() - started:.0f} s; the service {'answers' if alive else 'DIED or stopped answering'}")
    tracebacks = output.count("Traceback")
    print(f"tracebacks in the service's log: {tracebacks}")
    if tracebacks:
        print(output[output.index("Traceback") :][:3000])
    for problem in tally.problems[:50]:
        print("problem:", problem[:1000])
    if tally.counts["no answer in time"]:  # what the service said meanwhile, to see what it waited on
        print("the service's log, last lines:\n" + "\n".join(output.splitlines()[-60:]))
    return 0 if alive and not tracebacks and not tally.problems else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="how many requests to send (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis's seed, to repeat a run (default 0)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="modeldeck-fuzz-") as home:
        set_hypothesis_home_dir(Path(home) / "hypothesis")  # not ./.hypothesis, which pytest then refuses to pass
        return run(args.requests, args.seed, Path(home))


if __name__ == "__main__":
    sys.exit(main())

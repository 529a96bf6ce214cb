"""The index of pulled models when pulls finish together: downloads end on threads of the service (and a
`modeldeck pull` may end beside them), each adding its model to the same JSON file."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from app.hub.pulled import forget_pull, load_pulled, record_pull
from app.paths import AppPaths

THREADS, PULLS_EACH = 8, 10


def test_pulls_finishing_together_are_all_kept(paths: AppPaths, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def pull_many(worker: int) -> None:
        start.wait()
        for n in range(PULLS_EACH):
            try:
                record_pull(paths, f"org/model-{worker}-{n}", "Q4_K_M", "c0ffee", [model], "model", set())
            except Exception as exc:  # a lost race shows as any error: each one is a failure
                failures.append(exc)

    workers = [threading.Thread(target=pull_many, args=(w,)) for w in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    pulled = load_pulled(paths)
    assert len(pulled) == THREADS * PULLS_EACH
    assert len({m.id for m in pulled}) == len(pulled)  # each got its own id (model, model-2, ...)
    assert forget_pull(paths, pulled[0].id) == pulled[0]
    assert len(load_pulled(paths)) == len(pulled) - 1
    lock = paths.data / ".hub-models.json.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600  # private, as every file of the app

"""The index of pulled models when pulls finish together: downloads end on threads of the service (and a
`modeldeck pull` may end beside them), each adding its model to the same JSON file; and when it is damaged or
written by a later version."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

from app.hub.pulled import forget_pull, index_path, load_pulled, record_pull
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


def test_a_damaged_index_is_kept_aside_before_the_next_pull_writes_one(paths: AppPaths, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    record_pull(paths, "org/first", "Q4_K_M", "c0ffee", [model], "first", set())
    whole = index_path(paths).read_text()
    index_path(paths).write_text(whole[: len(whole) // 2])  # cut short by a full disk, say
    assert load_pulled(paths) == []
    record_pull(paths, "org/second", "Q4_K_M", "c0ffee", [model], "second", set())
    assert [m.id for m in load_pulled(paths)] == ["second"]
    assert index_path(paths).with_name("hub-models.json.bad").read_text() == whole[: len(whole) // 2]


def test_entries_of_a_later_version_or_broken_ones_do_not_break_the_index(paths: AppPaths, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    record_pull(paths, "org/first", "Q4_K_M", "c0ffee", [model], "first", set())
    data = json.loads(index_path(paths).read_text())
    later = data["models"][0] | {"license": "apache-2.0"}  # a field a later ModelDeck adds
    no_files = data["models"][0] | {"id": "empty", "files": []}
    index_path(paths).write_text(json.dumps({"schema": 1, "models": [later, no_files, None, "x"]}))
    assert [m.id for m in load_pulled(paths)] == ["first"]
    record_pull(paths, "org/second", "Q4_K_M", "c0ffee", [model], "second", set())
    assert [m.id for m in load_pulled(paths)] == ["first", "second"]

    index_path(paths).write_text(json.dumps({"schema": 1, "models": None}))
    assert load_pulled(paths) == []


def test_an_index_with_a_byte_order_mark_is_read_not_set_aside(paths: AppPaths, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    record_pull(paths, "org/first", "Q4_K_M", "c0ffee", [model], "first", set())
    index_path(paths).write_bytes(b"\xef\xbb\xbf" + index_path(paths).read_bytes())  # saved again by an editor
    assert [m.id for m in load_pulled(paths)] == ["first"]
    record_pull(paths, "org/second", "Q4_K_M", "c0ffee", [model], "second", set())
    assert [m.id for m in load_pulled(paths)] == ["first", "second"]
    assert not index_path(paths).with_name("hub-models.json.bad").exists()

"""Deleting a model touches only what is the model's own: real pulls from the stand-in Hub into a real cache, then
the cache tampered with as another tool (or another user with write access to a shared cache) could."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.hub.cache import RepoCache
from app.hub.library import known_models
from app.hub.pull import PullRequest, pull
from app.hub.pulled import PulledModel, load_pulled
from app.paths import AppPaths
from app.service.control.library_ops import LibraryError, delete_files
from app.task import TaskState
from tests.support.hub_server import FakeHub, add_repo, sha256


def pull_file(hub: FakeHub, paths: AppPaths, cache_dir: Path, name: str) -> PulledModel:
    request = PullRequest.parse(f"org/m/{name}")
    return pull(request, paths, TaskState(), endpoint=hub.url, token=None, cache_dir=cache_dir)


def test_a_blob_another_snapshot_links_to_stays(
    hub: FakeHub, gguf_bytes: bytes, paths: AppPaths, cache_dir: Path
) -> None:
    """An unchanged file in two revisions of a repository has one blob: another snapshot of it (an earlier pull,
    or another tool's download) links to it too, and deleting the model must keep the blob while that link is there."""
    add_repo(hub, "org/m", {"a-Q4_0.gguf": gguf_bytes})
    model = pull_file(hub, paths, cache_dir, "a-Q4_0.gguf")
    cache = RepoCache(cache_dir, "org/m")
    blob = cache.blob(sha256(gguf_bytes))
    other = cache.link(sha256(gguf_bytes), "1" * 40, "a-Q4_0.gguf")  # as huggingface_hub lays out a revision
    assert model.path.resolve() == other.resolve() == blob
    delete_files(known_models(paths)[model.id], paths)
    assert not model.path.exists() and not model.path.is_symlink()
    assert not model.path.parent.exists(), "the emptied snapshot folder was left behind"
    assert blob.is_file() and other.read_bytes() == gguf_bytes, "the other snapshot lost its file"
    assert load_pulled(paths) == []
    other.unlink()
    again = pull_file(hub, paths, cache_dir, "a-Q4_0.gguf")  # the blob is found, not fetched again
    assert len(hub.downloads("a-Q4_0.gguf")) == 1
    delete_files(known_models(paths)[again.id], paths)
    assert not blob.exists(), "a blob no snapshot links to was left behind"


def test_a_snapshot_link_pointing_outside_is_removed_not_followed(
    hub: FakeHub, gguf_bytes: bytes, paths: AppPaths, cache_dir: Path, tmp_path: Path
) -> None:
    add_repo(hub, "org/m", {"a-Q4_0.gguf": gguf_bytes})
    model = pull_file(hub, paths, cache_dir, "a-Q4_0.gguf")
    victim = tmp_path / "precious.gguf"
    victim.write_bytes(b"not ModelDeck's")
    model.path.unlink()
    model.path.symlink_to(victim)  # another tool re-pointed the snapshot entry
    delete_files(known_models(paths)[model.id], paths)
    assert victim.read_bytes() == b"not ModelDeck's"
    assert not model.path.is_symlink()
    assert load_pulled(paths) == []


def test_a_snapshot_folder_replaced_by_a_link_is_refused(
    hub: FakeHub, gguf_bytes: bytes, paths: AppPaths, cache_dir: Path, tmp_path: Path
) -> None:
    """The path to the file crosses a link: the delete is refused and says why; the files it leads to stay."""
    add_repo(hub, "org/m", {"a-Q4_0.gguf": gguf_bytes})
    model = pull_file(hub, paths, cache_dir, "a-Q4_0.gguf")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a-Q4_0.gguf").write_bytes(b"not ModelDeck's")
    snapshot = model.path.parent
    model.path.unlink()
    snapshot.rmdir()
    snapshot.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(LibraryError, match="not a folder") as refused:
        delete_files(known_models(paths)[model.id], paths)
    assert refused.value.status == 403
    assert (elsewhere / "a-Q4_0.gguf").read_bytes() == b"not ModelDeck's"


def test_an_imported_link_is_removed_and_its_target_kept(paths: AppPaths, bundled_gguf: Path, tmp_path: Path) -> None:
    """A link in the models folder to a file inside it: deleting the model removes the link, not the file."""
    paths.models_dir.mkdir(parents=True)
    real = paths.models_dir / "real.gguf"
    shutil.copyfile(bundled_gguf, real)
    spec = known_models(paths)["real"]
    assert spec.source == "local"
    link = paths.models_dir / "alias.gguf"
    link.symlink_to(real)
    alias = known_models(paths).get("alias")
    if alias is None:
        pytest.fail(f"the library does not list the link: {sorted(known_models(paths))}")
    delete_files(alias, paths)
    assert not link.is_symlink() and real.is_file()

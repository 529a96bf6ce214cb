"""What the service writes is for this user only: folders 0700, files 0600, even under a permissive umask and over
folders and a request log an earlier version left readable by everyone. The real service and engine; the request
log keeps prompt text here (--log-request-text)."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import start_service_process, stop_service_process
from tests.support.waiting import wait_for


@pytest.fixture
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the usual default: files 0644, folders 0755; the service inherits it
    try:
        yield
    finally:
        os.umask(previous)


def loose_modes(root: Path) -> list[str]:
    """Every folder or file under `root` that someone other than the user may read or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) & 0o077:
            found.append(f"{path.relative_to(root)} {stat.S_IMODE(mode):o}")
    return found


@pytest.mark.usefixtures("loose_umask")
def test_the_request_log_with_prompts_and_every_file_of_the_service_are_private(
    paths: AppPaths, modeldeck_home: Path, tmp_path: Path
) -> None:
    modeldeck_home.mkdir(mode=0o700)  # ModelDeck creates it so; an earlier version's folders inside it were not
    paths.data.mkdir(mode=0o755)
    sqlite3.connect(paths.requests_db).close()  # a request log an earlier version created 0644
    paths.requests_db.chmod(0o644)
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--log-request-text")
    try:
        client = service.openai_client()
        client.completions.create(model=BUNDLED_ID, prompt="My secret prompt", max_tokens=4)
        wait_for(lambda: service.client.requests(limit=5), 30, "the request in the log")
        loose = loose_modes(modeldeck_home)
        assert loose == [], f"readable by others: {loose}"
    finally:
        stop_service_process(service)
    prompts = sqlite3.connect(paths.requests_db).execute("SELECT * FROM requests").fetchall()
    assert "My secret prompt" in repr(prompts)  # the file checked is the one that holds the prompt
    assert loose_modes(modeldeck_home) == []

"""Downloads the service runs for its clients: each a pull on a worker thread with a progress-and-cancel token,
its progress published as `download` events, paused, resumed and cancelled through the control API.

A job's state changes only on the event loop; the worker thread reports through `call_soon_threadsafe`. Jobs are
kept in a file (app.service.jobs.download_store) whenever their state changes: after a restart, or a crash, a download
that was running shows as paused and resumes from the bytes on disk.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.api_types import DownloadRecord
from app.hub.cache import UnsafeName
from app.hub.errors import HubError
from app.hub.pull import PullRequest, pull
from app.hub.pulled import PulledModel
from app.hub.remote_file import RemoteFile
from app.hub.stores import FolderStore, HubCacheStore, Store, folder_for_repo
from app.hub.variants import SAFETENSORS, Variant
from app.paths import AppPaths
from app.service.events import EventBus
from app.service.jobs.download_store import from_record, load_records, save_records, to_record
from app.task import Progress, Stopped, TaskState

log = logging.getLogger("modeldeck.downloads")

JobState = Literal["running", "paused", "cancelled", "failed", "completed"]
ACTIVE: frozenset[JobState] = frozenset({"running", "paused"})
PROGRESS_INTERVAL_S = 0.25  # a few events a second, whatever the network's speed
MAX_PARALLEL = 3  # more wait their turn: parallel streams from one Hub rarely add speed
SHUTDOWN_WAIT_S = 5.0


def sentence(message: str) -> str:
    """The Hub core's messages start in lower case to read well after a program's name; a page shows sentences."""
    return message[:1].upper() + message[1:]


class DownloadConflict(Exception):
    """The request cannot be honoured in the job's present state; the message says why."""


@dataclass
class DownloadJob:
    """One download: what was asked, where it stands, and the token of its current run."""

    id: str
    request: PullRequest
    variant: Variant
    state: JobState = "running"
    done: int = 0
    total: int = 0
    rate_bps: float | None = None
    eta_s: float | None = None
    current: str = ""
    phase: str = "download"  # or "verify": hashing `current`, `checked` of `check_total` bytes
    checked: int = 0
    check_total: int = 0
    error: str | None = None
    model_id: str | None = None
    models_dir: Path | None = None  # where the files go as plain files; None: the Hugging Face cache
    placed: set[str] = field(default_factory=set)  # the files its runs put in the models folder: a cancel's to delete
    made_folder: bool = False  # its runs made the model's subfolder there: a cancel removes it once it is empty
    token: TaskState | None = field(default=None, repr=False)
    run: asyncio.Task[None] | None = field(default=None, repr=False)
    work: Future[PulledModel] | None = field(default=None, repr=False)  # the run's pull, queued for a thread

    def stop(self, reason: Literal["pause", "cancel"]) -> None:
        """Ask the run to stop: a pull under way at its next chunk or backoff, one still waiting for a download
        thread (MAX_PARALLEL are busy) at once, without starting."""
        if self.token is not None and reason == "pause":
            self.token.pause()
        elif self.token is not None:
            self.token.cancel()
        if self.work is not None:
            self.work.cancel()  # only succeeds while it waits for a thread

    def to_dict(self) -> DownloadRecord:
        total = self.total or (self.variant.size or 0)
        return {
            "id": self.id, "repo": self.request.repo_id, "variant": self.variant.name, "state": self.state,
            "done": self.done, "total": total, "rate_bps": self.rate_bps, "eta_s": self.eta_s,
            "current": self.current, "error": self.error, "model_id": self.model_id,
            "phase": self.phase, "checked": self.checked, "check_total": self.check_total,
        }  # fmt: skip


class Downloads:
    """Every download of this service run, by id."""

    def __init__(
        self,
        bus: EventBus,
        paths: AppPaths,
        cache_dir: Path,
        endpoint: str,
        on_pulled: Callable[[PulledModel], None],
        models_dir: Path | None = None,
    ) -> None:
        self._bus = bus
        self._models_dir = models_dir
        self._paths = paths
        self._cache_dir = cache_dir
        self._endpoint = endpoint
        self._on_pulled = on_pulled
        self._jobs: dict[str, DownloadJob] = {}
        self._ids = itertools.count(1)
        self._loaded = False
        self._saved_states: dict[str, JobState] = {}
        # Their own threads: a download holds one for minutes, and asyncio's shared pool (a few threads on a
        # small machine) also serves hardware detection, model headers and the keyring.
        self._executor = ThreadPoolExecutor(MAX_PARALLEL, thread_name_prefix="download")

    def jobs(self) -> list[DownloadJob]:
        self._restore()
        return list(self._jobs.values())

    def get(self, job_id: str) -> DownloadJob | None:
        self._restore()
        return self._jobs.get(job_id)

    def _restore(self) -> None:
        """Bring back the jobs of earlier runs, once, on first use (not in the constructor: it reads the disk).
        One that was running is paused now: nothing fetches it until someone resumes it."""
        if self._loaded:
            return
        self._loaded = True
        for raw in load_records(self._paths):
            try:
                job_id, request, variant, fields = from_record(raw)
            except (KeyError, TypeError, ValueError, HubError, UnsafeName) as exc:
                log.warning("a kept download could not be read (%s); skipped", exc)
                continue
            job = DownloadJob(job_id, request, variant, **fields)
            if job.state in ACTIVE:
                job.state, job.done = "paused", self._bytes_on_disk(job)
            self._jobs[job.id] = job
            self._saved_states[job.id] = job.state
        numbers = [int(i.removeprefix("dl-")) for i in self._jobs if i.removeprefix("dl-").isdigit()]
        self._ids = itertools.count(max(numbers, default=0) + 1)

    def _save(self) -> None:
        fields = ("state", "done", "total", "error", "model_id", "models_dir", "placed", "made_folder")
        records = [
            to_record(job.id, job.request, job.variant, {name: getattr(job, name) for name in fields})
            for job in self._jobs.values()
        ]
        try:
            save_records(self._paths, records)
        except OSError as exc:  # a full disk must not stop the download itself; the job is lost only on restart
            log.warning("the list of downloads could not be saved: %s", exc)

    def start(self, request: PullRequest, variant: Variant, hub_token: str | None) -> DownloadJob:
        """Begin fetching `variant`; refused while another job is fetching the same one. A paused or failed job for
        it into the same place (one kept from an earlier run, say) is resumed instead: the same download, not a
        second one writing the same partial files, which cancelling the first would delete."""
        self._restore()
        for job in reversed(self._jobs.values()):  # the latest first
            if job.request.repo_id != request.repo_id or job.variant.name != variant.name:
                continue
            resumable = job.state == "paused" or (job.state == "failed" and job.models_dir == self._models_dir)
            if resumable and (job.run is None or job.run.done()):
                return self.resume(job.id, hub_token)
            if job.state in ACTIVE:
                raise DownloadConflict(f"{variant.name} of {request.repo_id} is already being downloaded ({job.id}).")
        job = DownloadJob(
            f"dl-{next(self._ids)}", request, variant, total=variant.size or 0, models_dir=self._models_dir
        )
        self._jobs[job.id] = job
        self._launch(job, hub_token)
        return job

    def pause(self, job_id: str) -> DownloadJob:
        job = self._job(job_id)
        if job.state != "running" or job.token is None:
            raise DownloadConflict(f"{job.id} is {job.state}; only a running download can be paused.")
        job.stop("pause")  # the partial file is kept
        return job

    def resume(self, job_id: str, hub_token: str | None) -> DownloadJob:
        job = self._job(job_id)
        if job.state not in ("paused", "failed"):
            raise DownloadConflict(f"{job.id} is {job.state}; only a paused or failed download can be resumed.")
        if job.run is not None and not job.run.done():
            raise DownloadConflict(f"{job.id} is still stopping; try again in a moment.")
        job.state, job.error = "running", None
        self._launch(job, hub_token)
        return job

    async def cancel(self, job_id: str) -> DownloadJob:
        """Stop the job and delete its partial files, and the files it placed in a models folder (never one that was
        there before it) with the model's subfolder it made; the files already complete stay in the shared cache,
        where other tools use them too."""
        job = self._job(job_id)
        if job.state in ("cancelled", "completed"):
            raise DownloadConflict(f"{job.id} is {job.state}; there is nothing to cancel.")
        job.stop("cancel")
        if job.run is not None and not job.run.done():
            await asyncio.wait({job.run})
        if job.state == "completed":  # the cancel came after the last byte: the model is in the library
            return job
        job.state, job.rate_bps, job.eta_s = "cancelled", None, None  # before any await: a resume is refused now
        # A paused or failed job has no worker to delete its partials: do it here.
        await asyncio.to_thread(self._take_back, job)
        job.placed, job.made_folder = set(), False
        job.done = await asyncio.to_thread(self._bytes_on_disk, job)
        self._publish(job)
        return job

    async def pause_all(self) -> None:
        """At shutdown: stop every worker, keeping partial files for the next run to resume. A worker stuck
        reading from a stalled connection notices at its read timeout; shutdown does not wait that long."""
        runs = []
        for job in self._jobs.values():
            if job.token is not None and job.run is not None and not job.run.done():
                job.stop("pause")
                runs.append(job.run)
        if runs:
            await asyncio.wait(runs, timeout=SHUTDOWN_WAIT_S)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _job(self, job_id: str) -> DownloadJob:
        self._restore()
        job = self._jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def _launch(self, job: DownloadJob, hub_token: str | None) -> None:
        loop = asyncio.get_running_loop()

        def report(progress: Progress) -> None:  # on the worker thread
            loop.call_soon_threadsafe(self._on_progress, job, progress)

        # What earlier runs placed is this run's too: a pull that fails its model check takes it back with its own.
        job.token = TaskState(report, interval_s=PROGRESS_INTERVAL_S, placed=job.placed, made_folder=job.made_folder)
        job.run = asyncio.create_task(self._run(job, job.token, hub_token))
        self._publish(job)

    async def _run(self, job: DownloadJob, token: TaskState, hub_token: str | None) -> None:
        try:
            work = job.work = self._executor.submit(self._pull, job, token, hub_token)
            try:
                model = await asyncio.wrap_future(work)
            except asyncio.CancelledError:
                if not work.cancelled() or token.stop_requested is None:
                    raise
                raise Stopped(token.stop_requested) from None  # stopped before a thread took it
        except Stopped as stop:
            # Progress reports are throttled, so the last one may be behind what reached the disk.
            on_disk = await asyncio.to_thread(self._bytes_on_disk, job)
            job.state, job.done = ("paused" if stop.reason == "pause" else "cancelled"), on_disk
        except (HubError, UnsafeName) as exc:
            job.state, job.error = "failed", sentence(str(exc))
        except Exception as exc:  # a worker's failure has no other way to reach the user than the job's state
            log.exception("download %s failed", job.id)
            job.state, job.error = "failed", f"unexpected error ({type(exc).__name__}): {exc}"
        else:
            job.state, job.model_id, job.eta_s = "completed", model.id, 0.0
            job.done = job.total = model.size_bytes
            self._on_pulled(model)
        self._keep_placed(job, token.placed, token.made_folder)  # reports come only while it runs: one may be missing
        job.rate_bps, job.phase = None, "download"
        self._publish(job)

    def _pull(self, job: DownloadJob, token: TaskState, hub_token: str | None) -> PulledModel:
        return pull(
            job.request, self._paths, token, endpoint=self._endpoint, token=hub_token, cache_dir=self._cache_dir,
            models_dir=job.models_dir,
        )  # fmt: skip

    def _on_progress(self, job: DownloadJob, progress: Progress) -> None:
        if job.state != "running":
            return  # a late report of a run already stopped
        job.done, job.total, job.current = progress.done, progress.total, progress.current
        job.rate_bps, job.eta_s = progress.rate_bps, progress.eta_s
        job.phase, job.checked, job.check_total = progress.phase, progress.checked, progress.check_total
        if self._keep_placed(job, progress.placed, progress.made_folder):
            self._save()  # at once: after a crash, a cancel must still find what this job placed
        self._publish(job)

    @staticmethod
    def _keep_placed(job: DownloadJob, placed: tuple[str, ...], made_folder: bool) -> bool:
        """Take the token's account of what the job placed (it began from the job's); whether it changed."""
        changed = (job.placed, job.made_folder) != (set(placed), made_folder)
        job.placed, job.made_folder = set(placed), made_folder
        return changed

    def _store(self, job: DownloadJob) -> Store:
        if job.models_dir is None:
            return HubCacheStore(self._cache_dir)
        subfolder = folder_for_repo(job.request.repo_id) if job.variant.name == SAFETENSORS else None
        return FolderStore(job.models_dir, subfolder)

    def _lfs_files(self, job: DownloadJob) -> list[RemoteFile]:
        """The job's large files as the store names them (small git files are a few kilobytes: not counted)."""
        repo = job.request.repo_id
        return [RemoteFile(repo, f.path, "main", "", f.sha256, f.size or 0, "") for f in job.variant.files if f.sha256]

    def _bytes_on_disk(self, job: DownloadJob) -> int:
        store, done = self._store(job), 0
        for file in self._lfs_files(job):
            for path in (store.final(file), store.incomplete(file)):
                if path.is_file():
                    done += path.stat().st_size
                    break
        return done

    def _take_back(self, job: DownloadJob) -> None:
        store = self._store(job)
        for file in self._lfs_files(job):
            store.incomplete(file).unlink(missing_ok=True)
        if isinstance(store, FolderStore):  # each a file of the job's variant (app.service.jobs.download_store checks)
            store.take_back(job.placed, job.made_folder)

    def _publish(self, job: DownloadJob) -> None:
        if self._saved_states.get(job.id) != job.state:  # kept at each change of state, not at each progress event
            self._saved_states[job.id] = job.state
            self._save()
        self._bus.publish({"type": "download", "download": job.to_dict()})

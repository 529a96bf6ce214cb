"""Chat templates rendered off the event loop, in a worker process (app.service.gateway.template_worker) killed when a
render takes longer than its time limit. The worker starts on the first render and again after each kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from engines.python_entry import module_command

log = logging.getLogger("modeldeck.templates")

TIME_LIMIT_S = 5.0  # a real template renders a long conversation in milliseconds
START_LIMIT_S = 60.0  # the worker's interpreter and Jinja imported, on a busy machine
_MAX_ANSWER_BYTES = 64 * 1024 * 1024  # the worker's output limit in characters, as JSON-escaped UTF-8


@dataclass(frozen=True)
class Rendered:
    """The prompt a chat template made of a conversation, or why there is none."""

    text: str | None
    problem: str | None = None  # a sentence fragment: "the sandbox refused it: ...", "it took longer than 5 s"
    kind: str | None = None  # refused (the conversation), broken, security (the sandbox), limit (time, size)


class TemplateRenderer:
    """Renders one template at a time in its worker; `close()` ends the worker."""

    def __init__(self, time_limit_s: float = TIME_LIMIT_S) -> None:
        self._time_limit_s = time_limit_s
        self._worker: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._reaping: set[asyncio.Future[int]] = set()

    async def render(self, template: str, messages: Any) -> Rendered:
        try:
            request = json.dumps({"template": template, "messages": messages}).encode() + b"\n"
        except (TypeError, ValueError, RecursionError) as exc:
            return Rendered(None, f"the messages cannot be passed to it ({exc.__class__.__name__})", "refused")
        async with self._lock:
            try:
                worker = await self._started()
            except (OSError, TimeoutError) as exc:
                self._kill()
                return Rendered(None, f"the renderer did not start ({exc.__class__.__name__})", "limit")
            except asyncio.CancelledError:
                self._kill()
                raise
            try:
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write(request)
                async with asyncio.timeout(self._time_limit_s):
                    await worker.stdin.drain()
                    line = await worker.stdout.readline()
            except TimeoutError:
                self._kill()
                return Rendered(None, f"it took longer than {self._time_limit_s:g} s to render", "limit")
            except (OSError, ValueError) as exc:  # the worker died (its memory limit), or answered too much
                self._kill()
                return Rendered(None, f"the renderer failed ({exc.__class__.__name__})", "limit")
            except asyncio.CancelledError:
                self._kill()  # its answer, when it comes, would be taken for the next request's
                raise
            if not line:
                self._kill()
                return Rendered(None, "the renderer exited (over its memory limit)", "limit")
        try:
            answer = json.loads(line)
        except ValueError:
            return Rendered(None, "the renderer answered something that is not JSON", "limit")
        if "text" in answer:
            return Rendered(str(answer["text"]))
        return Rendered(None, str(answer.get("problem")), str(answer.get("kind")))

    async def _started(self) -> asyncio.subprocess.Process:
        """The worker, started and ready; OSError or TimeoutError when it cannot be."""
        if self._worker is None or self._worker.returncode is not None:
            worker = self._worker = await asyncio.create_subprocess_exec(
                *module_command("app.service.gateway.template_worker"),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                limit=_MAX_ANSWER_BYTES,
            )  # fmt: skip
            assert worker.stdout is not None
            async with asyncio.timeout(START_LIMIT_S):
                ready = await worker.stdout.readline()
            if not ready:
                raise OSError("the renderer exited as it started")
        return self._worker

    def _kill(self) -> None:
        """Kill the worker now (a render over its limits, or one nobody waits for); reaped in the background."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        if worker.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
        reaping = asyncio.ensure_future(worker.wait())
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)
        log.info("chat template worker %s stopped: a render failed or ran out of time", worker.pid)

    async def close(self) -> None:
        """End the worker: stdin closed, it exits; killed if it does not within a second."""
        if self._reaping:
            await asyncio.gather(*self._reaping)
        worker, self._worker = self._worker, None
        if worker is None or worker.returncode is not None:
            return
        assert worker.stdin is not None
        worker.stdin.close()
        try:
            await asyncio.wait_for(worker.wait(), 1.0)
        except TimeoutError:
            worker.kill()
            await worker.wait()

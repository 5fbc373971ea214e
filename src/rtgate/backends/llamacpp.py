"""An embedded GGUF model (llama-cpp-python) behind the :class:`Backend` interface.

Inference never runs on the event loop: one dedicated worker thread owns the model and
takes requests from a bounded queue. Queue policy: at most ``queue_size`` requests wait
behind the one running; a newcomer beyond that gets :class:`~rtgate.core.errors.QueueFull` at
once (the newcomer is rejected, the loop never blocks). Tokens go back to the loop as they
are produced (``call_soon_threadsafe``); the per-request output queue holds at most
``max_tokens`` deltas plus one end marker, so it is bounded by the request itself.

When the consumer stops (the gate cancelled it, the budget is spent), a cancel flag is set
and the worker stops between two tokens; a request cancelled while queued leaves the queue
at once. The budget's time left at submission becomes the worker's own deadline.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from rtgate.backends._llama_engine import EngineStats, LlamaEngine
from rtgate.backends.base import Backend, Generation
from rtgate.core.budget import Budget
from rtgate.core.errors import (
    BackendError,
    BackendUnavailable,
    InvalidRequest,
    QueueFull,
    RtgateError,
)
from rtgate.models.locate import MODELS, locate_model

__all__ = ["LlamaCppBackend", "LlamaStream"]


class _Job:
    """One request travelling from the loop to the worker and its results coming back."""

    def __init__(
        self, kind: str, payload: Any, deadline: float, on_done: Callable[[_Job], None]
    ) -> None:
        self.kind = kind
        self.payload = payload
        self.deadline = deadline
        self.loop = asyncio.get_running_loop()
        self.out: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.finished = asyncio.Event()
        self.cancel = threading.Event()
        self.tokens = 0
        self._on_done = on_done

    def should_stop(self) -> bool:
        return self.cancel.is_set() or time.monotonic() >= self.deadline

    def emit(self, kind: str, value: Any = None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, (kind, value))
        except RuntimeError:  # the loop is gone: nobody is listening any more
            self.cancel.set()

    def done(self) -> None:
        """Mark the job finished (on the loop thread)."""
        if not self.finished.is_set():
            self.finished.set()
            self._on_done(self)

    def finish(self) -> None:
        """Mark the job finished (from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.done)
        except RuntimeError:
            pass


class _Slots:
    """The bounded request queue (reject the newcomer when full)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._q: deque[_Job] = deque()
        self._cv = threading.Condition()
        self.closed = False

    def put(self, job: _Job, *, front: bool = False) -> None:
        with self._cv:
            if self.closed:
                raise BackendUnavailable("backend is closed")
            if len(self._q) >= self.size:
                raise QueueFull(f"llama.cpp queue full ({self.size} waiting)")
            if front:
                self._q.appendleft(job)
            else:
                self._q.append(job)
            self._cv.notify()

    def take(self) -> _Job | None:
        with self._cv:
            while not self._q and not self.closed:
                self._cv.wait()
            return None if self.closed else self._q.popleft()

    def remove(self, job: _Job) -> bool:
        with self._cv:
            try:
                self._q.remove(job)
            except ValueError:
                return False
            return True

    def close(self) -> list[_Job]:
        with self._cv:
            self.closed = True
            left = list(self._q)
            self._q.clear()
            self._cv.notify_all()
            return left

    def __len__(self) -> int:
        return len(self._q)


class LlamaStream:
    """Text deltas of one generation; :meth:`cancel` stops the worker between tokens."""

    def __init__(self, job: _Job, slots: _Slots) -> None:
        self._job = job
        self._slots = slots
        self._done = False

    @property
    def tokens(self) -> int:
        """Tokens generated (final once :meth:`finished` is done)."""
        return self._job.tokens

    async def finished(self) -> None:
        """Wait until the worker is done with this request."""
        await self._job.finished.wait()

    def cancel(self) -> None:
        self._job.cancel.set()
        if self._slots.remove(self._job):  # still queued: free the slot now
            self._job.done()

    def __aiter__(self) -> LlamaStream:
        return self

    async def __anext__(self) -> str:
        if self._done:
            raise StopAsyncIteration
        kind, value = await self._job.out.get()
        if kind == "delta":
            return str(value)
        self._done = True
        if kind == "error":
            raise value
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.cancel()


class LlamaCppBackend(Backend):
    """A packaged (``"smollm2"``, ``"gemma3-270m"``) or user GGUF model run in-process.

    Args:
        model: a name known to :func:`~rtgate.models.locate.locate_model` or a file path.
        queue_size: requests that may wait behind the running one (then ``QueueFull``).
        prefix_cache: reuse evaluated prompt prefixes (see :mod:`._llama_engine`).
        chat: use the GGUF chat template for messages (``None``: if the model is chat-tuned).
    """

    def __init__(
        self,
        model: str | Path = "smollm2",
        *,
        n_ctx: int = 2048,
        n_threads: int = 2,
        n_batch: int = 512,
        queue_size: int = 8,
        prefix_cache: bool = True,
        repeat_penalty: float = 1.0,
        chat: bool | None = None,
        max_candidates: int = 64,
        name: str | None = None,
    ) -> None:
        if queue_size < 1:
            raise InvalidRequest("queue_size must be >= 1")
        known = isinstance(model, str) and model in MODELS
        self.path = locate_model(str(model)) if known else locate_model(path=model)
        info = MODELS.get(str(model)) if known else None
        self.chat_model: bool | None = chat if chat is not None else (info.chat if info else None)
        self.name = name or f"llamacpp:{model if known else self.path.stem}"
        self.max_candidates = max_candidates
        self._engine_args: dict[str, Any] = dict(
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_batch=n_batch,
            prefix_cache=prefix_cache,
            repeat_penalty=repeat_penalty,
            chat=chat,
        )
        self._slots = _Slots(queue_size)
        self._jobs: set[_Job] = set()
        self._jobs_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._engine: LlamaEngine | None = None
        self._load_error: BaseException | None = None
        self._running: _Job | None = None
        self.rejected = 0

    # -- public API -------------------------------------------------------------------
    @property
    def engine_stats(self) -> EngineStats:
        """Prompt/prefix/token counters of the engine (zeros before it has loaded)."""
        return self._engine.stats if self._engine is not None else EngineStats()

    @property
    def queued(self) -> int:
        return len(self._slots)

    def submit(self, gen: Generation, budget: Budget | None = None) -> LlamaStream:
        """Queue ``gen`` now (raises ``QueueFull`` synchronously) and return its stream."""
        if gen.max_tokens < 1:
            raise InvalidRequest("max_tokens must be >= 1")
        return LlamaStream(self._submit("generate", gen, budget), self._slots)

    async def generate(self, gen: Generation, budget: Budget | None = None) -> AsyncIterator[str]:
        stream = self.submit(gen, budget)
        try:
            async for delta in stream:
                yield delta
        finally:
            stream.cancel()

    async def score(
        self,
        prefix: str,
        candidates: Sequence[str],
        budget: Budget | None = None,
        *,
        normalize: bool = False,
        urgent: bool = False,
    ) -> list[float]:
        """Log-likelihood of each candidate as a continuation of ``prefix`` (off the loop).

        Goes through the same bounded queue as generation. ``normalize`` divides by the
        candidate's token count (fairer between long and short candidates). ``urgent`` puts
        it at the head of the queue: a scoring pass is short, a generation is long, so a
        latency-critical score (turn-taking) should not wait behind queued generations.
        """
        if len(candidates) > self.max_candidates:
            raise InvalidRequest(f"at most {self.max_candidates} candidates")
        payload = (prefix, tuple(candidates), normalize)
        result = await self._call("score", payload, budget, front=urgent)
        return list(result)

    async def prime(self, gen: Generation) -> int:
        """Evaluate and keep the prompt of ``gen`` as a cached prefix; returns its length.

        For chat messages the prompt is rendered without the generation cue, so call it
        with the shared part (system prompt, few-shot turns) only.
        """
        return int(await self._call("prime", gen, None))

    async def warmup(self) -> None:
        """Load the model and run one token, so the first real request is not cold."""
        async for _ in self.generate(Generation(prompt="Hello", max_tokens=1)):
            pass

    async def idle(self) -> None:
        """Wait until every request submitted from this event loop has left the worker."""
        loop = asyncio.get_running_loop()
        while mine := [j for j in self._live_jobs() if j.loop is loop]:
            await asyncio.gather(*(j.finished.wait() for j in mine))

    def _live_jobs(self) -> list[_Job]:
        with self._jobs_lock:  # a job whose loop closed before its end was noted is gone
            self._jobs = {
                j for j in self._jobs if not j.finished.is_set() and not j.loop.is_closed()
            }
            return list(self._jobs)

    async def aclose(self) -> None:
        for job in self._slots.close():
            job.emit("error", BackendUnavailable("backend closed"))
            job.done()
        if self._running is not None:
            self._running.cancel.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    # -- plumbing ---------------------------------------------------------------------
    def _submit(self, kind: str, payload: Any, budget: Budget | None, front: bool = False) -> _Job:
        left = budget.left_s() if budget is not None else math.inf
        if self._slots.closed:
            raise BackendUnavailable(f"{self.name} is closed")
        job = _Job(kind, payload, time.monotonic() + left, self._forget)
        self._start()
        try:
            self._slots.put(job, front=front)
        except QueueFull:
            self.rejected += 1
            raise
        with self._jobs_lock:
            self._jobs.add(job)
        return job

    def _forget(self, job: _Job) -> None:
        with self._jobs_lock:
            self._jobs.discard(job)

    async def _call(
        self, kind: str, payload: Any, budget: Budget | None, front: bool = False
    ) -> Any:
        job = self._submit(kind, payload, budget, front)
        try:
            tag, value = await job.out.get()
        finally:
            job.cancel.set()
            if self._slots.remove(job):
                job.done()
        if tag == "error":
            raise value
        return value

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"rtgate-{self.name}")
            self._thread.daemon = True
            self._thread.start()

    def _work(self) -> None:
        try:
            self._engine = LlamaEngine(self.path, **self._engine_args)
            self.chat_model = self._engine.chat
        except Exception as exc:  # fail every request with the reason, keep taking them
            self._load_error = exc
        while (job := self._slots.take()) is not None:
            self._running = job
            try:
                self._process(job)
            finally:
                self._running = None
                job.finish()
        if self._engine is not None:
            self._engine.close()

    def _process(self, job: _Job) -> None:
        engine = self._engine
        if job.cancel.is_set():
            return
        if engine is None:
            err = BackendUnavailable(f"cannot load {self.path.name}: {self._load_error}")
            job.emit("error", err)
            return
        if job.should_stop():
            job.emit("error", TimeoutError("budget spent while queued"))
            return
        before = engine.stats.generated_tokens
        try:
            if job.kind == "generate":
                for delta in engine.stream(job.payload, job.should_stop):
                    job.emit("delta", delta)
                job.tokens = engine.stats.generated_tokens - before
                if job.cancel.is_set():
                    return
                if job.should_stop():
                    job.emit("error", TimeoutError(f"budget spent after {job.tokens} tokens"))
                    return
                job.emit("end")
            elif job.kind == "score":
                prefix, candidates, normalize = job.payload
                job.emit("result", engine.score(prefix, candidates, job.should_stop, normalize))
            else:
                tokens, _ = engine.render(job.payload, cue=False)
                engine.prime(tokens)
                job.emit("result", len(tokens))
        except (RtgateError, TimeoutError) as exc:
            job.emit("error", exc)
        except Exception as exc:
            job.emit("error", BackendError(f"llama.cpp failed: {exc!r}"))

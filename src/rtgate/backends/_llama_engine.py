"""A synchronous llama.cpp engine: prompt rendering, prefix-state cache, streaming, scoring.

Owned by exactly one thread (the :class:`~rtgate.backends.llamacpp.LlamaCppBackend` worker);
nothing here is thread-safe. Keeping the model code plain and synchronous keeps it testable
and keeps the async wrapper thin.

Prefix cache: after a prompt is evaluated, the KV cache already holds it, so a next prompt
sharing its start only evaluates the rest (llama.cpp does this for the *last* prompt). To
survive alternating prompts (Chinese and English few-shot blocks, several system prompts)
the engine also keeps the KV state of shared prefixes (``llama_state_seq_get_data``, a few
hundred KB per prefix, sub-millisecond to save or restore) in a small LRU. A prefix is saved
when :meth:`prime` is called or when two recent prompts share at least ``min_prefix_tokens``.
"""

from __future__ import annotations

import codecs
import ctypes
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from rtgate.backends.base import Generation
from rtgate.backends.native_log import route_native_logs
from rtgate.backends.stops import StopFilter, looping
from rtgate.core.errors import InvalidRequest

__all__ = ["EngineStats", "LlamaEngine"]

ShouldStop = Callable[[], bool]
_MAX_CANDIDATE_TOKENS = 64


@dataclass(slots=True)
class EngineStats:
    """Counters (updated by the engine thread, read by anyone)."""

    prompts: int = 0
    prompt_tokens: int = 0
    prompt_tokens_reused: int = 0
    prefix_restores: int = 0
    prefix_saves: int = 0
    generated_tokens: int = 0
    loops_stopped: int = 0


def _common(a: Iterable[int], b: Iterable[int], limit: int) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if n >= limit or x != y:
            break
        n += 1
    return n


class _StateLRU:
    """Saved KV states of seq 0, keyed by the token prefix they hold; bounded by bytes."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self._bytes = 0

    def best(self, tokens: Sequence[int], limit: int) -> tuple[tuple[int, ...], bytes] | None:
        found: tuple[tuple[int, ...], bytes] | None = None
        for key, blob in self._items.items():
            n = len(key)
            if n <= limit and (found is None or n > len(found[0])) and _common(key, tokens, n) == n:
                found = (key, blob)
        if found is not None:
            self._items.move_to_end(found[0])
        return found

    def put(self, key: tuple[int, ...], blob: bytes) -> None:
        if key in self._items:
            self._bytes -= len(self._items.pop(key))
        self._items[key] = blob
        self._bytes += len(blob)
        while self._items and (len(self._items) > self.max_entries or self._bytes > self.max_bytes):
            _, old = self._items.popitem(last=False)
            self._bytes -= len(old)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


class LlamaEngine:
    """One GGUF model in one llama.cpp context.

    Args:
        path: the GGUF file.
        chat: use the model's chat template for ``Generation.messages``; ``None`` means
            "if the GGUF has one". Without a template messages become a plain transcript.
        prefix_cache: keep and reuse evaluated prefixes; ``False`` evaluates every prompt
            from scratch (for measuring what the cache buys).
        stop_on_loop: stop when the text ends in a repeated phrase (small models loop).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 2048,
        n_threads: int = 2,
        n_batch: int = 512,
        chat: bool | None = None,
        prefix_cache: bool = True,
        prefix_cache_entries: int = 8,
        prefix_cache_bytes: int = 128 << 20,
        min_prefix_tokens: int = 16,
        repeat_penalty: float = 1.0,
        stop_on_loop: bool = True,
        seed: int = 0,
    ) -> None:
        route_native_logs()
        self.llm = Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_batch=n_batch,
            seed=seed,
            swa_full=True,  # sliding-window models (Gemma 3) must allow partial KV removal
            verbose=False,
        )
        self.n_vocab = self.llm.n_vocab()
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        template = self.llm.metadata.get("tokenizer.chat_template")
        self.chat = bool(template) if chat is None else chat
        self._formatter: Jinja2ChatFormatter | None = None
        if self.chat and template:
            model = self.llm._model
            eos, bos = self.llm.token_eos(), self.llm.token_bos()
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=model.token_get_text(eos) if eos != -1 else "",
                bos_token=model.token_get_text(bos) if bos != -1 else "",
            )
        self.repeat_penalty = repeat_penalty
        self.stop_on_loop = stop_on_loop
        self.prefix_cache = prefix_cache
        self.min_prefix_tokens = min_prefix_tokens
        self._states = _StateLRU(prefix_cache_entries, prefix_cache_bytes)
        self._recent: deque[tuple[int, ...]] = deque(maxlen=8)
        self.stats = EngineStats()

    # -- prompts -----------------------------------------------------------------------
    def render(self, gen: Generation, cue: bool = True) -> tuple[list[int], list[str]]:
        """Tokens of the prompt for ``gen`` and the extra stop strings its format needs.

        ``cue=False`` leaves out the assistant-turn opener (to prime a shared prefix).
        """
        if gen.prompt is not None:
            return self.tokenize(gen.prompt), []
        if not gen.messages:
            raise InvalidRequest("a Generation needs messages or a prompt")
        msgs = [{"role": m.role, "content": m.content} for m in gen.messages]
        if self._formatter is not None:
            self._formatter.add_generation_prompt = cue
            res = self._formatter(messages=msgs)  # type: ignore[arg-type]
            toks = self.llm.tokenize(
                res.prompt.encode(), add_bos=not res.added_special, special=True
            )
            stops = [s for s in (res.stop if isinstance(res.stop, list) else [res.stop]) if s]
            return toks, stops
        names = {"system": "System", "user": "User", "assistant": "Assistant"}
        text = "".join(f"{names[m.role]}: {m.content}\n" for m in gen.messages)
        text += "Assistant:" if cue else ""
        return self.tokenize(text), ["\nUser:", "\nSystem:"]

    def tokenize(self, text: str) -> list[int]:
        """Tokens of ``text`` with the model's BOS when it wants one."""
        return self.llm.tokenize(text.encode(), add_bos=True, special=False)

    # -- prefix cache ------------------------------------------------------------------
    def prime(self, tokens: Sequence[int]) -> None:
        """Evaluate ``tokens`` and keep their state, so prompts starting with them skip it."""
        if not self.prefix_cache:
            return
        self._reuse(tokens, limit=len(tokens))
        self._eval_to(tokens, len(tokens))
        self._save(tokens)

    def _reuse(self, tokens: Sequence[int], limit: int) -> None:
        """Leave the KV cache holding the longest known prefix of ``tokens[:limit]``."""
        llm = self.llm
        if not self.prefix_cache:
            llm.n_tokens = 0  # what Llama.reset() does: the next eval starts from scratch
            return
        have = _common(llm._input_ids.tolist(), tokens, limit)
        saved = self._states.best(tokens, limit)
        if saved is not None and len(saved[0]) > have:
            key, blob = saved
            llm._ctx.kv_cache_seq_rm(0, 0, -1)
            buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
            if llama_cpp.llama_state_seq_set_data(llm.ctx, buf, len(blob), 0) == len(blob):
                llm.input_ids[: len(key)] = key
                have = len(key)
                self.stats.prefix_restores += 1
            else:  # a state from another context shape: drop to a cold start
                have = 0
        llm.n_tokens = have
        llm._ctx.kv_cache_seq_rm(0, have, -1)

    def _share(self, tokens: Sequence[int], limit: int) -> None:
        """Save the prefix ``tokens`` shares with a recent prompt, when it reaches at least
        ``min_prefix_tokens`` past what the KV cache already holds."""
        if not self.prefix_cache:
            return
        shared = max((_common(r, tokens, limit) for r in self._recent), default=0)
        self._recent.append(tuple(tokens))
        if shared < self.llm.n_tokens + self.min_prefix_tokens:
            return  # nothing new worth a state: already in the KV cache or too short
        if tuple(tokens[:shared]) in self._states:
            return
        self._eval_to(tokens, shared)
        self._save(tokens[:shared])

    def _eval_to(self, tokens: Sequence[int], end: int) -> None:
        start = self.llm.n_tokens
        if end > start:
            self.llm.eval(list(tokens[start:end]))
            self.stats.prompt_tokens += end - start

    def _save(self, prefix: Sequence[int]) -> None:
        ctx = self.llm.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
        self._states.put(tuple(prefix), ctypes.string_at(buf, n))
        self.stats.prefix_saves += 1

    def _prepare(self, tokens: Sequence[int]) -> None:
        limit = len(tokens) - 1  # the last token is always evaluated: it gives fresh logits
        self._reuse(tokens, limit)
        reused = self.llm.n_tokens
        self._share(tokens, limit)
        self.stats.prompts += 1
        self.stats.prompt_tokens_reused += reused
        self.stats.prompt_tokens += len(tokens) - self.llm.n_tokens

    # -- generation --------------------------------------------------------------------
    def stream(self, gen: Generation, should_stop: ShouldStop) -> Iterator[str]:
        """Yield text deltas for ``gen``; stop between tokens once ``should_stop()``."""
        tokens, extra_stops = self.render(gen)
        if len(tokens) + gen.max_tokens > self.llm.n_ctx():
            raise InvalidRequest(
                f"prompt ({len(tokens)} tokens) + max_tokens ({gen.max_tokens}) > n_ctx"
            )
        self._prepare(tokens)
        stops = StopFilter([*gen.stop, *extra_stops])
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        produced, text = 0, ""
        sampling: dict[str, Any] = {"temp": gen.temperature, "repeat_penalty": self.repeat_penalty}
        for tok in self.llm.generate(tokens, reset=True, **sampling):
            if should_stop() or llama_cpp.llama_vocab_is_eog(self._vocab, tok):
                break
            produced += 1
            self.stats.generated_tokens += 1
            out = stops.feed(utf8.decode(self.llm.detokenize([tok])))
            if out:
                yield out
                text += out
            if stops.done or produced >= gen.max_tokens:
                break
            if self.stop_on_loop and looping(text[-96:]):
                self.stats.loops_stopped += 1
                break
        tail = stops.flush()  # a character cut in half by max_tokens is dropped, not replaced
        if tail and not should_stop():
            yield tail

    # -- scoring -----------------------------------------------------------------------
    def score(
        self,
        prefix: str,
        candidates: Sequence[str],
        should_stop: ShouldStop,
        normalize: bool = False,
    ) -> list[float]:
        """Log-likelihood of each candidate continuing ``prefix`` (natural log, summed).

        ``normalize`` divides by the candidate's token count. An empty candidate scores 0.
        """
        base = self.tokenize(prefix)
        out: list[float] = []
        # log-softmax of the next-token row after each context scored in this call: every
        # one-token candidate after the same context is then read off one evaluation
        rows: dict[tuple[int, ...], npt.NDArray[np.float64]] = {}
        for cand in candidates:
            if should_stop():
                raise TimeoutError("scoring stopped")
            full = self.tokenize(prefix + cand)
            k = max(1, _common(base, full, len(full)))
            if k >= len(full):
                out.append(0.0)
                continue
            if len(full) - k > _MAX_CANDIDATE_TOKENS:
                raise InvalidRequest(f"candidate longer than {_MAX_CANDIDATE_TOKENS} tokens")
            if len(full) > self.llm.n_ctx():
                raise InvalidRequest(f"prefix + candidate ({len(full)} tokens) > n_ctx")
            first = rows.get(tuple(full[:k]))
            if first is not None and len(full) - k == 1:
                total = float(first[full[k]])
            else:
                self._reuse(full, k - 1)
                self._eval_to(full, k - 1)
                total, rows[tuple(full[:k])] = self._logprob_tail(full, k)
            out.append(total / (len(full) - k) if normalize else total)
        return out

    def _logprob_tail(self, full: Sequence[int], k: int) -> tuple[float, npt.NDArray[np.float64]]:
        """Sum of log p(full[j] | full[:j]) for j >= k, and the log-softmax row that
        predicts ``full[k]``; the KV cache holds full[:k-1].

        Only ``full[k-1:-1]`` is evaluated: the last token's own logits predict nothing here
        (with a 262k vocabulary, the output layer is most of a small model's cost per token).
        """
        llm = self.llm
        chunk = list(full[k - 1 : -1])
        llm._batch.set_batch(batch=chunk, n_past=k - 1, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.input_ids[k - 1 : len(full) - 1] = chunk
        llm.n_tokens = len(full) - 1
        total = 0.0
        first: npt.NDArray[np.float64] | None = None
        for i, target in enumerate(full[k:]):
            ptr: Any = llama_cpp.llama_get_logits_ith(llm.ctx, i)
            row = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)
            row -= row.max()
            row -= np.log(np.exp(row).sum())
            total += float(row[target])
            if first is None:
                first = row
        assert first is not None  # k < len(full): at least one target
        return total, first

    def close(self) -> None:
        self.llm.close()

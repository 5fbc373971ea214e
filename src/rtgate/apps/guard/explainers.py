"""The explainers: who writes the root-cause hypothesis of a stop, and what they see.

- :class:`RuleExplainer`: deterministic, instant; the envelope diagnosis turned into one
  Chinese sentence. The fallback for everything.
- :class:`LLMExplainer`: a local language model (Gemma 3 270M through llama.cpp) completes a
  sentence started from the measured facts; an answer naming another bearing part than the
  diagnosis is refused. Its model code is imported lazily, inside its methods, so importing
  this module loads none of it.

Both answer with at most ``MAX_CHARS`` (30) characters.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.diagnose import Diagnosis
from rtgate.apps.guard.simulate import BEARINGS, Bearing
from rtgate.core.errors import ConfigError

__all__ = [
    "MAX_CHARS",
    "Explainer",
    "LLMExplainer",
    "Machine",
    "RuleExplainer",
    "StopContext",
    "load_machines",
    "truncate",
]

MAX_CHARS = 30
_KIND_ZH = {"outer": "外圈", "inner": "内圈", "ball": "滚动体"}
_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True, slots=True)
class Machine:
    """What the plant knows about a station's machine (optional; sharpens the diagnosis)."""

    shaft_hz: float | None = None
    bearing: Bearing | None = None


def load_machines(path: str | Path) -> dict[str, Machine]:
    """``[machines.NAME]`` tables of a rules file: ``shaft_hz`` and a ``bearing``, either a
    catalogue name (``"6205"``) or ``n_balls``, ``ball_mm``, ``pitch_mm``, ``contact_deg``.
    Raises :class:`ConfigError` on a bad entry."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from e
    catalogue = {b.name: b for group in BEARINGS.values() for b in group}
    out: dict[str, Machine] = {}
    for name, m in data.get("machines", {}).items():
        try:
            bearing = None
            if isinstance(m.get("bearing"), str):
                bearing = catalogue[m["bearing"]]
            elif "n_balls" in m:
                bearing = Bearing(
                    name,
                    int(m["n_balls"]),
                    float(m["ball_mm"]),
                    float(m["pitch_mm"]),
                    float(m.get("contact_deg", 0.0)),
                )
            shaft = m.get("shaft_hz")
            out[name] = Machine(float(shaft) if shaft is not None else None, bearing)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"[machines.{name}] is not a valid machine: {e!r}") from e
    return out


@dataclass(frozen=True, slots=True)
class StopContext:
    """What an explainer sees: the stop, its clip and the diagnosis."""

    station: str
    score: float
    stop_ts: float
    window_end_ts: float
    rule: str
    clip: npt.NDArray[np.float32] = field(repr=False)
    machine: Machine = field(default_factory=Machine)
    diagnosis: Diagnosis | None = None
    note: str = ""  # e.g. why the rule-based explainer was used


class Explainer(Protocol):
    """Writes a root-cause hypothesis for a stop."""

    name: str

    async def explain(self, context: StopContext) -> str: ...


def truncate(text: str, limit: int = MAX_CHARS) -> str:
    """First line of ``text``, stripped, cut to ``limit`` characters."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line[:limit]


class RuleExplainer:
    """Deterministic: the diagnosis turned into one Chinese sentence."""

    name = "rules"

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars

    def sentence(self, ctx: StopContext) -> str:
        d = ctx.diagnosis
        if d is None or d.impact_hz <= 0:
            text = f"{ctx.station}工位声纹异常（分数{ctx.score:.2f}），建议停机检查轴承"
        elif d.kind is not None:
            part = _KIND_ZH[d.kind]
            text = f"{ctx.station}工位疑似轴承{part}损伤，冲击{d.impact_hz:.0f}Hz，建议停机检修"
        else:
            text = f"{ctx.station}工位周期冲击{d.impact_hz:.0f}Hz，疑似轴承损伤，建议停机检查"
        return truncate(text, self.max_chars)

    async def explain(self, context: StopContext) -> str:
        return self.sentence(context)


_FEW_SHOT = (
    "设备声纹告警后的维修工单。每条写一句中文根因假设，不超过25字。\n"
    "告警：异常分0.97，包络谱冲击频率86Hz，约3.6倍转频，外圈特征。\n"
    "根因：疑似电机轴承外圈剥落，建议停机更换轴承。\n"
    "告警：异常分0.95，包络谱冲击频率143Hz，约5.4倍转频，内圈特征。\n"
    "根因：疑似轴承内圈点蚀，建议停机检查轴承与润滑。\n"
    "告警：异常分0.93，包络谱冲击频率150Hz，部位未定。\n"
    "根因：疑似轴承早期损伤，建议停机检查润滑与安装。\n"
    "告警：异常分0.99，包络谱冲击频率120Hz，滚动体特征。\n"
    "根因：疑似轴承滚动体损伤，建议停机拆检轴承。\n"
)


class LLMExplainer:
    """A local language model (GGUF via llama.cpp, default Gemma 3 270M) writes the sentence.

    The model is loaded on first use (or ``warmup``); ``n_threads`` is kept at 1 so it does
    not compete with the stop path for the second core.
    """

    name = "llm"

    def __init__(
        self, model: str = "gemma3-270m", n_threads: int = 1, max_chars: int = MAX_CHARS
    ) -> None:
        self.model = model
        self.n_threads = n_threads
        self.max_chars = max_chars
        self._backend: Any = None

    @staticmethod
    def available(model: str = "gemma3-270m") -> bool:
        """True when the model's weights and llama.cpp are installed."""
        try:
            import llama_cpp  # noqa: F401

            from rtgate.models.locate import locate_model

            locate_model(model)
        except Exception:
            return False
        return True

    def _get(self) -> Any:
        if self._backend is None:
            from rtgate.backends.llamacpp import LlamaCppBackend

            self._backend = LlamaCppBackend(self.model, n_threads=self.n_threads, n_ctx=512)
        return self._backend

    @staticmethod
    def _lead(ctx: StopContext) -> str:
        """The start of the answer, fixed from the measured facts; the model completes it."""
        d = ctx.diagnosis
        return f"疑似轴承{_KIND_ZH[d.kind]}" if d is not None and d.kind else "疑似轴承"

    def prompt(self, ctx: StopContext) -> str:
        d = ctx.diagnosis
        facts = d.facts() if d is not None and d.impact_hz > 0 else "无周期冲击"
        facts += f"，{_KIND_ZH[d.kind]}特征" if d is not None and d.kind else "，部位未定"
        return f"{_FEW_SHOT}告警：异常分{ctx.score:.2f}，{facts}。\n根因：{self._lead(ctx)}"

    async def warmup(self) -> None:
        """Load the model and keep the few-shot prefix evaluated (the first answer is fast)."""
        from rtgate.backends.base import Generation

        backend = self._get()
        await backend.warmup()
        await backend.prime(Generation(prompt=_FEW_SHOT))

    async def explain(self, context: StopContext) -> str:
        """``"{station}工位"`` + the hypothesis; the part named is the diagnosis' own (the answer
        is started for the model), and an answer naming another part is refused."""
        from rtgate.backends.base import Generation

        gen = Generation(prompt=self.prompt(context), max_tokens=40, stop=("\n", "告警"))
        tail = "".join([d async for d in self._get().generate(gen)])
        text = truncate(self._lead(context) + tail, self.max_chars)
        if len(_CJK.findall(tail)) < 3:
            raise ValueError(f"unusable explanation {text!r}")
        kind = context.diagnosis.kind if context.diagnosis is not None else None
        named = {k for k, zh in _KIND_ZH.items() if zh in text}
        if named - ({kind} if kind else set()):  # a part the envelope did not point at
            raise ValueError(f"explanation contradicts the diagnosis: {text!r}")
        return truncate(f"{context.station}工位{text}", self.max_chars)

    async def aclose(self) -> None:
        if self._backend is not None:
            await self._backend.aclose()
            self._backend = None

"""The wall: the stop path imports nothing of the language-model code, and the explainer's
side cannot publish a stop."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import rtgate.apps.guard as guard_pkg
from rtgate.apps.guard.explain_worker import ExplainWorker

GUARD = Path(guard_pkg.__file__).parent
STOP_PATH = ["audio", "features", "detector", "baseline", "rules", "events", "mqtt", "pipeline"]
LLM = (
    "rtgate.gate",
    "rtgate.tiers",
    "rtgate.backends",
    "rtgate.models",
    "rtgate.tiers.emulated",
    "llama_cpp",
)


def _imports(module: str) -> set[str]:
    """Every module named by an import statement anywhere in ``guard/<module>.py``."""
    tree = ast.parse((GUARD / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_stop_path_sources_name_no_llm_module() -> None:
    seen: set[str] = set()
    todo = list(STOP_PATH)
    while todo:  # follow the guard's own imports transitively
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        for name in _imports(mod):
            assert not name.startswith(LLM), f"{mod}.py imports {name}"
            if name.startswith("rtgate.apps.guard."):
                todo.append(name.rsplit(".", 1)[1])
            elif name.startswith("rtgate."):
                assert name in {"rtgate.core.errors"}, f"{mod}.py reaches into {name}"
    assert not seen & {"explain_worker", "explain_child", "explainers", "store"}


def test_importing_the_stop_path_loads_no_llm_module() -> None:
    code = (
        "import sys\n"
        + "".join(f"import rtgate.apps.guard.{m}\n" for m in STOP_PATH)
        + "import rtgate.apps.guard.explain_worker\n"  # its model imports are lazy
        + f"bad = sorted(m for m in sys.modules if m.startswith({LLM!r}))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.strip()
    assert loaded == "", (
        f"the stop path drags in language-model code: {loaded}. If these come from "
        "rtgate/__init__.py re-exporting the gate eagerly, make those re-exports lazy (PEP 562)."
    )


def test_explainer_side_cannot_reach_the_publisher() -> None:
    for mod in ("explain_worker", "explain_child", "explainers", "store", "diagnose"):
        names = _imports(mod)
        assert not any(n.endswith(("guard.mqtt", "guard.pipeline")) for n in names), mod
        assert not any(n.startswith("paho") for n in names), mod
    params = inspect.signature(ExplainWorker.__init__).parameters
    assert not any("pub" in p or "mqtt" in p or "client" in p or "sink" in p for p in params)

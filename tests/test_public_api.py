from __future__ import annotations

import inspect

import rtgate
import rtgate.core.errors


def test_all_is_complete_and_importable() -> None:
    for name in rtgate.__all__:
        assert hasattr(rtgate, name), name
    exported = set(rtgate.__all__)
    for name in rtgate.core.errors.__all__:
        assert name in exported, f"error {name} not re-exported"


def test_every_error_has_a_code_and_derives_from_the_base() -> None:
    codes = set()
    for name in rtgate.core.errors.__all__:
        cls = getattr(rtgate.core.errors, name)
        assert inspect.isclass(cls) and issubclass(cls, rtgate.RtgateError)
        codes.add(cls.code)
    assert len(codes) == len(rtgate.core.errors.__all__)


def test_lazy_exports_cover_exactly_all() -> None:
    assert sorted(rtgate._MODULE_OF) == sorted(rtgate.__all__)


def test_importing_rtgate_loads_no_gate_code() -> None:
    import subprocess
    import sys

    code = "import sys, rtgate; print(any(m.startswith('rtgate.gate') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

"""Where llama.cpp's own log lines go.

llama.cpp prints from native code while it loads a model (``llama_context: …``,
``load_tensors: …``, context and cache sizes). A person running ``rtgate demo`` wants the
demo, not that chatter; an operator debugging a model wants all of it. The environment
variable ``RTGATE_NATIVE_LOG`` decides, in every process that loads a model (it is
inherited by the guard's explainer child and by subprocesses):

- unset: warnings and errors go to stderr, the rest is dropped;
- ``stderr``: every line goes to stderr (``rtgate demo --verbose``);
- a path: every line is appended to that file (``rtgate demo`` writes ``native.log`` in
  its output folder).

:func:`route_native_logs` installs the callback once per process; the model engine calls it
before it loads a model.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import IO, Any

__all__ = ["ENV", "route_native_logs"]

ENV = "RTGATE_NATIVE_LOG"

# ggml_log_level: 0 none, 1 info, 2 warn, 3 error, 4 debug, 5 continues the previous line
_WARN, _ERROR, _CONT = 2, 3, 5

_lock = threading.Lock()
_installed: Any = None  # the ctypes callback: it must outlive every native call to it
_file: IO[str] | None = None
_last_level = 0


def _sink() -> IO[str] | None:
    """The stream a line goes to (None: only warnings and errors, to stderr)."""
    global _file
    target = os.environ.get(ENV, "")
    if not target:
        return None
    if target == "stderr":
        return sys.stderr
    if _file is None or _file.name != target:
        _file = open(target, "a", encoding="utf-8", buffering=1)
    return _file


def _write(level: int, text: bytes) -> None:
    global _last_level
    level = _last_level if level == _CONT else level
    _last_level = level
    line = text.decode("utf-8", errors="replace")
    try:
        out = _sink()
        if out is None:
            if level in (_WARN, _ERROR):
                sys.stderr.write(line)
            return
        out.write(line)
    except OSError:
        pass  # a log line must never break model loading


def route_native_logs() -> None:
    """Send llama.cpp's log lines where ``RTGATE_NATIVE_LOG`` says (idempotent)."""
    global _installed
    with _lock:
        if _installed is not None:
            return
        import llama_cpp

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def _callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            _write(level, text)

        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
        _installed = _callback

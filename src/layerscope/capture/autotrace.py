"""Tracing a script that never imports layerscope: ``LAYERSCOPE_TRACE=1 LAYERSCOPE_TRACE_DIR=DIR python script.py``.

The ``layerscope-trace.pth`` file the package installs into site-packages imports this module at
interpreter start only when ``LAYERSCOPE_TRACE`` is set (the check is one ``os.environ`` lookup;
torch is not imported otherwise). :func:`start` then watches every HF model the script runs and
writes the records to ``LAYERSCOPE_TRACE_DIR`` (default ``layerscope-trace``) at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

logger = logging.getLogger(__name__)

#: Values of ``LAYERSCOPE_TRACE`` that turn tracing on.
ON_VALUES = ("1", "true", "yes", "on")
#: Default output directory when ``LAYERSCOPE_TRACE_DIR`` is unset.
DEFAULT_DIR = "layerscope-trace"


def start() -> None:
    """Start tracing if ``LAYERSCOPE_TRACE`` asks for it; a no-op otherwise (or without torch)."""
    if os.environ.get("LAYERSCOPE_TRACE", "").strip().lower() not in ON_VALUES:
        return
    try:
        import torch  # noqa: F401  # the hooks need it; absent torch means nothing to trace
    except ImportError:
        sys.stderr.write("layerscope: LAYERSCOPE_TRACE is set but torch is not installed; not tracing\n")
        return
    from layerscope.capture.recorder import Recorder

    out = os.environ.get("LAYERSCOPE_TRACE_DIR") or DEFAULT_DIR
    rec = Recorder(source="trace")
    rec.watch_all()
    rec.__enter__()
    atexit.register(_finish, rec, os.path.abspath(out))


def _finish(rec: object, out: str) -> None:
    from layerscope.capture.recorder import Recorder
    from layerscope.errors import LayerscopeError

    assert isinstance(rec, Recorder)
    rec.close()
    try:
        os.makedirs(out, exist_ok=True)
        rec.records.write(out)
    except (LayerscopeError, OSError) as exc:
        sys.stderr.write(f"layerscope: cannot write the trace records to {out!r}: {exc}\n")

"""The profiler's native chatter, sent to logging instead of the terminal.

This torch build's Kineto writes lines such as ``USDT:… SyncActivityProfilerHandler.cpp:52] profiler_start`` from
C++ straight to file descriptor 2 when a profiler session starts and stops, whatever ``KINETO_LOG_LEVEL`` says.
:func:`native_stderr_logged` runs a block with descriptor 2 going to a temporary file and logs each line written
there (INFO by default: ``layerscope -v`` shows them, a plain run does not); a block that raises logs them at
WARNING, since they may say why. :class:`QuietProfiler` wraps a ``torch.profiler.profile`` so that its ``start``,
``step`` and ``stop`` (where Kineto writes) run inside it, and nothing else does.

torch is not imported here.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)


@contextmanager
def native_stderr_logged(level: int = logging.INFO, logger: logging.Logger = log) -> Iterator[None]:
    """Run the block with file descriptor 2 going to a temporary file; log each non-empty line written there at
    ``level`` (WARNING when the block raises)."""
    sys.stderr.flush()
    saved = os.dup(2)
    failed = False
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 2)
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines = sink.read().decode("utf-8", "replace").splitlines()
            for line in lines:
                if line.strip():
                    logger.log(logging.WARNING if failed else level, "torch profiler: %s", line.rstrip())


class QuietProfiler:
    """A ``torch.profiler.profile`` used as a context manager, its native output logged
    (:func:`native_stderr_logged`); ``step()`` steps the profiler's schedule."""

    def __init__(self, profiler: Any, level: int = logging.INFO) -> None:
        self.profiler = profiler
        self.level = level

    def __enter__(self) -> QuietProfiler:
        with native_stderr_logged(self.level):
            self.profiler.__enter__()
        return self

    def step(self) -> None:
        with native_stderr_logged(self.level):
            self.profiler.step()

    def __exit__(self, *exc: Any) -> None:
        with native_stderr_logged(self.level):
            self.profiler.__exit__(*exc)

    def events(self) -> Any:
        return self.profiler.events()

    def export_chrome_trace(self, path: str) -> None:
        self.profiler.export_chrome_trace(path)

"""``capture.quiet``: what C code writes to file descriptor 2 goes to the log, not the terminal."""

from __future__ import annotations

import logging
import os

import pytest

from layerscope.capture.quiet import QuietProfiler, native_stderr_logged


def test_native_lines_are_logged_not_printed(capfd: pytest.CaptureFixture[str],
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="layerscope.capture.quiet")
    with native_stderr_logged():
        os.write(2, b"USDT:2026-11-27 07:31:47 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n\n")
    assert capfd.readouterr().err == ""
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == "torch profiler: USDT:2026-11-27 07:31:47 1:1 SyncActivityProfilerHandler.cpp:52] " \
                                  "profiler_start"
    os.write(2, b"after\n")  # descriptor 2 is the terminal's again
    assert capfd.readouterr().err == "after\n"


def test_a_block_that_fails_logs_them_as_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="layerscope.capture.quiet")
    with pytest.raises(RuntimeError), native_stderr_logged(logging.DEBUG):
        os.write(2, b"CUPTI_ERROR_NOT_INITIALIZED\n")
        raise RuntimeError("the profiler failed")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "torch profiler: CUPTI_ERROR_NOT_INITIALIZED")]


def test_quiet_profiler_runs_start_step_stop_with_the_lines_logged(capfd: pytest.CaptureFixture[str],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    caplog.set_level(logging.INFO, logger="layerscope.capture.quiet")
    with QuietProfiler(profile(activities=[ProfilerActivity.CPU],
                               schedule=schedule(wait=0, warmup=1, active=1, repeat=1))) as prof:
        for _ in range(2):
            torch.ones(4).add(1)
            prof.step()
    assert "profiler_start" not in capfd.readouterr().err
    assert len(prof.events()) > 0

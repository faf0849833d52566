"""``layerscope demo``/``validate`` options of the machine measurement, through the installed entry point: a bad
thread count or wait is one ``error:`` line and exit 2, before anything is measured or written."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("args", "needle"), [
    (("--threads", "0"), "--threads"),
    (("--threads", "two"), "use auto or a thread count"),
    (("--threads", "-3"), "must be >= 1"),
    (("--wait-quiet", "-1"), "--wait-quiet -1.0: must be >= 0 seconds"),
])
def test_bad_machine_options_exit_2_and_write_nothing(run_cli, tmp_path, args, needle):
    out = tmp_path / "demo"
    proc = run_cli("demo", "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and needle in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_validate_rejects_a_bad_thread_count(run_cli, tmp_path):
    out = tmp_path / "v"
    proc = run_cli("validate", "--model", "llama-3.2-1b", "--layers", "1", "--threads", "0", "--out", str(out))
    assert proc.returncode == 2 and "--threads" in proc.stderr and not out.exists()


def test_validate_rejects_a_negative_wait(run_cli, tmp_path):
    out = tmp_path / "v"
    proc = run_cli("validate", "--model", "llama-3.2-1b", "--layers", "1", "--wait-quiet", "-1", "--out", str(out))
    assert proc.returncode == 2 and "--wait-quiet -1.0: must be >= 0 seconds" in proc.stderr and not out.exists()

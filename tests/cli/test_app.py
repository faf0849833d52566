"""The console entry point (:func:`layerscope.cli.app.main`): usage errors are messages with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.parametrize(("args", "message"), [
    (("analyze", "trace.json", "--no-such-option"), "No such option: --no-such-option"),
    (("no-such-command",), "No such command 'no-such-command'"),
    (("estimate", "-m", "llama-3.2-1b", "--batch", "many"), "Invalid value for '--batch'"),
])
def test_usage_errors_exit_2_without_traceback(run_cli: Run, args: tuple[str, ...], message: str) -> None:
    # typer >= 0.29 vendors click: its usage errors are not click.ClickException subclasses.
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_layerscope_error_is_one_line_exit_2(run_cli: Run) -> None:
    done = run_cli("analyze", "/nonexistent/trace.json")
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_command_modules_list_what_each_module_registers() -> None:
    import importlib

    import typer

    from layerscope.cli.app import COMMAND_MODULES

    for module, commands in COMMAND_MODULES.items():
        one = typer.Typer()
        importlib.import_module(f"layerscope.cli.{module}").register(one)
        assert tuple(c.name for c in one.registered_commands) == commands, module


@pytest.mark.parametrize(("argv", "modules"), [
    (["estimate", "--model", "llama-3.1-8b"], ("estimate",)),
    (["-v", "models", "--json"], ("catalogs",)),
    (["serving-grid", "--help"], ("serving",)),
    (["open", "t.json"], ("simulate",)),
    ([], None),
    (["--help"], None),
    (["--help", "estimate"], None),
    (["-v"], None),
    (["no-such-command"], None),
])
def test_a_command_line_loads_only_its_command_module(argv: list[str], modules: tuple[str, ...] | None) -> None:
    from layerscope.cli.app import COMMAND_MODULES, make_app, modules_for

    assert modules_for(argv) == modules
    app = make_app(modules)
    expected = [c for m in (COMMAND_MODULES if modules is None else modules) for c in COMMAND_MODULES[m]]
    assert [c.name for c in app.registered_commands] == expected


def test_the_root_help_lists_every_command_and_a_command_help_its_own(run_cli: Run) -> None:
    from layerscope.cli.app import COMMAND_MODULES

    root = run_cli("--help")
    assert root.returncode == 0, root.stderr
    assert all(c in root.stdout for commands in COMMAND_MODULES.values() for c in commands)
    own = run_cli("serving-grid", "--help")
    assert own.returncode == 0 and "--ray" in own.stdout, own.stderr


def test_the_process_setup_raises_the_collector_threshold_and_skips_the_plugin_scan() -> None:
    code = ("import gc, os, sys; sys.argv = ['layerscope', 'models', '--json']\n"
            "from layerscope.cli import app\n"
            "try:\n    app.main()\nexcept SystemExit:\n    pass\n"
            "print(gc.get_threshold()[0], os.environ.get('PYDANTIC_DISABLE_PLUGINS'), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"})
    assert done.returncode == 0, done.stderr
    from layerscope.cli.app import GC_THRESHOLD_0

    assert done.stderr.split() == [str(GC_THRESHOLD_0), "__all__"]


def test_an_estimate_loads_nothing_it_does_not_run() -> None:
    """#31.4: ``layerscope estimate`` on a preset imports no YAML parser, spreadsheet reader, cluster model, kernel
    table, masked arrays or other command; printing to a pipe, no rich; a preset built without validators, no
    calibration record; a graph without communication ops, no collective models; no attention-kernel fit (the
    cost model's head-dim factor is ``hardware.head_dim``)."""
    from tests.conftest import modules_loaded

    unneeded = ("yaml", "openpyxl", "numpy.ma", "layerscope.hardware.cluster", "layerscope.hardware.kernel_table",
                "layerscope.cli.plan", "layerscope.cli.serving", "layerscope.serving", "layerscope.schedule",
                "layerscope.trace", "rich", "layerscope.hardware.calibration", "layerscope.cost.collectives",
                "layerscope.hardware.attention_fit")
    code = ("import sys; sys.argv = ['layerscope', 'estimate', '--model', 'llama-3.1-8b', '--hardware', 'h100-sxm']\n"
            "from layerscope.cli.app import main\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code")
    assert modules_loaded(code, unneeded) == []


def test_a_trace_command_runs_without_pandas_and_gives_the_same_tables(tmp_path) -> None:
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "data" / "traces" / "gpu-triton-example.json.gz"
    code = ("import sys; from layerscope.cli.app import main\n"
            f"sys.argv = ['layerscope', 'query', {str(trace)!r}, 'select name, dur from slice order by ts, name']\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print('pandas' in sys.modules, file=sys.stderr)")
    import importlib.util

    env = {**os.environ, "LAYERSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    # With pandas installed (not a dependency), also a run with it loaded first: the same rows.
    preludes = ("", "import pandas\n") if importlib.util.find_spec("pandas") else ("",)
    runs = [subprocess.run([sys.executable, "-c", pre + code], capture_output=True, text=True, timeout=120, env=env)
            for pre in preludes]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert [r.stderr.split()[-1] for r in runs] == ["False", "True"][:len(runs)]
    assert all(r.stdout == runs[0].stdout for r in runs) and runs[0].stdout.count("\n") > 3


def test_refused_packages_are_refused_only_while_the_command_runs(monkeypatch) -> None:
    import importlib

    from layerscope.cli import app as cli_app

    monkeypatch.setitem(cli_app.NOT_IMPORTED, "analyze", ("layerscope_probe_package",))
    finders = list(sys.meta_path)
    with cli_app._not_imported(("analyze",)), pytest.raises(ModuleNotFoundError, match="not used by this layerscope"):
        importlib.import_module("layerscope_probe_package.sub")
    assert sys.meta_path == finders
    with cli_app._not_imported(("estimate",)):
        assert sys.meta_path == finders

"""The SQL of ``layerscope query`` reaches the trace's tables and nothing else (layerscope/analysis/engine.py).

Each attack runs through the installed command, as a user (or a recipe pasted from the web) would run it:
exit 2, one ``error:`` line naming what was refused, and no file read, written or created.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from layerscope.analysis.engine import TraceDB
from layerscope.errors import AnalysisError

from .conftest import DATA

TRACE = str(DATA / "cpu-only.json.gz")
SECRET = "layerscope-secret-4f1c9a"

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    """A home directory holding a secret file, and the environment that points at it."""
    path = tmp_path / "home"
    path.mkdir()
    (path / "secret.txt").write_text(f"name,value\n{SECRET},1\n")
    return path


def refused(out: subprocess.CompletedProcess[str], *, why: str = "disabled by configuration") -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: query failed:"), out.stderr
    assert why in lines[0]
    assert "Traceback" not in out.stderr
    assert out.stdout == ""
    assert SECRET not in out.stdout + out.stderr


def query(run_cli: Run, home: Path, sql: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "LAYERSCOPE_CACHE_DIR": str(home.parent / "cache")}
    return run_cli("query", TRACE, sql, "--format", "csv", env=env, cwd=home)


def test_the_trace_is_queryable(run_cli: Run, home: Path) -> None:
    # The lock leaves the engine's own work alone: views, json_tree over args, the Parquet cache.
    for _ in range(2):  # the second run reads the cache
        out = query(run_cli, home, "SELECT (SELECT COUNT(*) FROM slice) AS slices, "
                                   "(SELECT COUNT(*) FROM args) > 0 AS has_args")
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == ['"slices","has_args"', "18,true"]


@pytest.mark.parametrize("reader", ["read_csv('{p}')", "read_text('{p}')", "read_blob('{p}')",
                                    "read_json('{p}')"])
def test_no_file_is_read(run_cli: Run, home: Path, reader: str) -> None:
    refused(query(run_cli, home, f"SELECT * FROM {reader.format(p=home / 'secret.txt')}"))


def test_a_path_is_not_a_table(run_cli: Run, home: Path) -> None:
    # DuckDB's replacement scan of a quoted file name is off with external access
    refused(query(run_cli, home, f"SELECT * FROM '{home / 'secret.txt'}'"), why="does not exist")


def test_passwd_is_not_read(run_cli: Run, home: Path) -> None:
    out = query(run_cli, home, "SELECT * FROM read_csv('/etc/passwd')")
    refused(out)
    assert "root:" not in out.stdout


def test_no_directory_is_listed(run_cli: Run, home: Path) -> None:
    out = query(run_cli, home, f"SELECT * FROM glob('{home}/*')")
    refused(out)
    assert "secret.txt" not in out.stdout


def test_the_cache_is_not_read_by_sql(run_cli: Run, home: Path) -> None:
    assert query(run_cli, home, "SELECT 1").returncode == 0  # writes the Parquet cache
    cached = sorted((home.parent / "cache").glob("*/slice.parquet"))
    assert cached
    refused(query(run_cli, home, f"SELECT COUNT(*) FROM read_parquet('{cached[0]}')"))


def test_copy_to_writes_nothing(run_cli: Run, home: Path) -> None:
    target = home / "out.csv"
    refused(query(run_cli, home, f"COPY (SELECT name FROM slice) TO '{target}'"))
    assert not target.exists()
    refused(query(run_cli, home, f"EXPORT DATABASE '{home / 'export'}'"))
    assert not (home / "export").exists()


def test_copy_cannot_overwrite_a_file(run_cli: Run, home: Path) -> None:
    before = (home / "secret.txt").read_bytes()
    refused(query(run_cli, home, f"COPY (SELECT 1) TO '{home / 'secret.txt'}' (FORMAT csv)"))
    assert (home / "secret.txt").read_bytes() == before


def test_attach_creates_no_database(run_cli: Run, home: Path) -> None:
    refused(query(run_cli, home, f"ATTACH '{home / 'new.db'}' AS other"))
    assert not (home / "new.db").exists()


@pytest.mark.parametrize("sql", ["INSTALL httpfs", "LOAD httpfs", "LOAD '{home}/evil.duckdb_extension'"])
def test_no_extension_is_installed_or_loaded(run_cli: Run, home: Path, sql: str) -> None:
    (home / "evil.duckdb_extension").write_bytes(b"\0" * 64)
    out = query(run_cli, home, sql.format(home=home))
    assert out.returncode == 2 and out.stderr.startswith("error: query failed:"), out.stderr
    assert len(out.stderr.splitlines()) == 1
    assert not (home / ".duckdb").exists()  # nothing downloaded into the home directory


@pytest.mark.parametrize("sql", [
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "SET lock_configuration = false",
    "SET profiling_output = '{home}/profile.txt'",
    "SET enable_external_access = true; SELECT * FROM read_csv('{home}/secret.txt')",
])
def test_the_lock_cannot_be_undone(run_cli: Run, home: Path, sql: str) -> None:
    refused(query(run_cli, home, sql.format(home=home)), why="the configuration has been locked")
    assert not (home / "profile.txt").exists()


def test_library_connections_are_locked(home: Path) -> None:
    with TraceDB(DATA / "cpu-only.json.gz", use_cache=False) as db:
        assert db.scalar("SELECT current_setting('enable_external_access')") is False
        assert db.scalar("SELECT current_setting('lock_configuration')") is True
        with pytest.raises(AnalysisError, match="disabled by configuration"):
            db.query(f"SELECT * FROM read_text('{home / 'secret.txt'}')")
        with pytest.raises(duckdb.Error, match="locked"):
            db.connection.execute("SET enable_external_access = true")

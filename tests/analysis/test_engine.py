"""DuckDB engine (layerscope/analysis/engine.py): trace_processor's tables, queries, cache.

Expected values came from the Perfetto trace processor via /work/shared/tools/perfetto-oracle on
2026-11-21 (the query is given next to each).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from layerscope.analysis import engine
from layerscope.analysis.engine import TraceDB, cache_dir, content_key, run_query
from layerscope.errors import AnalysisError, TraceError
from layerscope.trace import readers

from .conftest import DATA

Run = Callable[..., subprocess.CompletedProcess[str]]

RECIPE = ("SELECT name, COUNT(*) AS launches, SUM(dur)/1e6 AS total_ms FROM slices "
          "GROUP BY name ORDER BY total_ms DESC LIMIT 50")

# trace_processor's columns (docs: perfetto.dev/docs/analysis/sql-tables) that queries use
COLUMNS = {
    "slice": {"id", "ts", "dur", "track_id", "category", "name", "depth", "parent_id", "arg_set_id",
              "thread_ts", "thread_dur", "cat", "slice_id"},
    "thread": {"utid", "id", "tid", "name", "upid", "start_ts", "end_ts", "is_main_thread"},
    "process": {"upid", "id", "pid", "name", "start_ts", "end_ts", "parent_upid", "uid", "cmdline", "arg_set_id"},
    "track": {"id", "name", "type", "parent_id"},
    "thread_track": {"id", "name", "utid"},
    "counter_track": {"id", "name", "unit"},
    "counter": {"id", "ts", "track_id", "value"},
    "flow": {"id", "slice_out", "slice_in", "arg_set_id"},
    "args": {"arg_set_id", "flat_key", "key", "int_value", "string_value", "real_value", "value_type",
             "display_value"},
}


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_tables_have_trace_processor_columns(control_db: TraceDB, table: str) -> None:
    cols = set(control_db.query(f"SELECT * FROM {table} LIMIT 0").column_names)
    assert COLUMNS[table] <= cols


def test_trace_processor_recipe_runs_unchanged(control_db: TraceDB) -> None:
    top = control_db.query(RECIPE).to_pylist()
    # perfetto-oracle: the same query
    assert top[:3] == [{"name": "PyTorch Profiler (0)", "launches": 1, "total_ms": 479.255},
                       {"name": "## backward ##", "launches": 6, "total_ms": 206.813},
                       {"name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "launches": 42,
                        "total_ms": 130.655}]


def test_oracle_numbers(control_db: TraceDB) -> None:
    # SELECT COUNT(*), SUM(dur) FROM slice WHERE category = 'kernel'
    assert control_db.records("SELECT COUNT(*) AS n, SUM(dur) AS d FROM slice WHERE category = 'kernel'") == [
        {"n": 8568, "d": 446813000}]
    # SELECT COUNT(*) FROM thread_track / track / flow
    assert control_db.scalar("SELECT COUNT(*) FROM thread_track") == 7
    assert control_db.scalar("SELECT COUNT(*) FROM track") == 8
    assert control_db.scalar("SELECT COUNT(*) FROM flow") == 9450
    # SELECT COUNT(DISTINCT parent_id) AS np, SUM(parent_id IS NULL) AS roots FROM slice
    assert control_db.records("SELECT COUNT(DISTINCT parent_id) AS np, SUM(CASE WHEN parent_id IS NULL "
                              "THEN 1 ELSE 0 END) AS roots FROM slice") == [{"np": 29206, "roots": 13944}]
    # thread names of GPU streams, joined as trace_processor queries join them
    rows = control_db.records("""
        SELECT t.name AS tname, COUNT(*) AS n, SUM(s.dur) AS d FROM slice s
        JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
        WHERE t.name LIKE 'stream%' GROUP BY t.name ORDER BY t.name""")
    assert rows == [{"tname": "stream 20 ", "n": 282, "d": 7165000}, {"tname": "stream 21 ", "n": 60, "d": 163535000},
                    {"tname": "stream 22 ", "n": 144, "d": 50640000}, {"tname": "stream 7 ", "n": 8964, "d": 280227000}]


def test_args_match_trace_processor() -> None:
    with TraceDB(DATA / "gpu-triton-example.json.gz") as db:
        rows = db.records("""SELECT flat_key, key, int_value, string_value, real_value, value_type, display_value
                             FROM args WHERE arg_set_id = (SELECT arg_set_id FROM slice WHERE category = 'kernel')""")
    by_key = {r["key"]: r for r in rows}
    # perfetto-oracle: SELECT ... FROM args WHERE arg_set_id = (kernel's)
    assert by_key["args.stream"] == {"flat_key": "args.stream", "key": "args.stream", "int_value": 7,
                                     "string_value": None, "real_value": None, "value_type": "int",
                                     "display_value": "7"}
    assert by_key["args.grid[2]"]["flat_key"] == "args.grid"
    assert by_key["args.blocks per SM"]["real_value"] == pytest.approx(0.009259)
    assert by_key["args.blocks per SM"]["value_type"] == "real"
    assert "args.est. achieved occupancy %" in by_key
    assert len(rows) == 17


def test_nulls_sort_first_like_sqlite(control_db: TraceDB) -> None:
    cats = [r["category"] for r in control_db.records(
        "SELECT category, COUNT(*) AS n FROM slice GROUP BY category ORDER BY category")]
    assert cats[0] is None and cats[1] == "Trace"


def test_cache_is_written_and_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    src = DATA / "gpu-sampled-rank0.json.gz"
    with TraceDB(src) as db:
        first = db.query(RECIPE)
    target = cache_dir() / content_key(src)
    assert {p.name for p in target.iterdir()} >= {"slice.parquet", "thread.parquet", "meta.json"}

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("the trace was parsed again instead of read from the cache")

    monkeypatch.setattr(readers, "read_trace", boom)
    with TraceDB(src) as db:
        assert db.query(RECIPE).equals(first)
    assert content_key(src).endswith(f"-v{engine.CACHE_VERSION}")
    assert not list((tmp_path / "cache").glob(".*"))  # no temporary leftovers


def test_no_cache_and_tables_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path / "c"))
    tables = readers.read_trace(DATA / "cpu-only.json.gz")
    with TraceDB(tables) as db:
        assert db.scalar("SELECT COUNT(*) FROM slice") == 18
    assert run_query(DATA / "cpu-only.json.gz", "SELECT COUNT(*) AS n FROM slice", use_cache=False).to_pylist() == [
        {"n": 18}]
    assert not (tmp_path / "c").exists()


def test_query_errors_are_analysis_errors(control_db: TraceDB) -> None:
    with pytest.raises(AnalysisError, match="query failed"):
        control_db.query("SELECT * FROM no_such_table")
    with pytest.raises(AnalysisError):
        control_db.query("SELEC")
    with pytest.raises(TraceError):
        TraceDB(DATA / "missing.json.gz")


def test_sums_are_integers_and_result_is_arrow(control_db: TraceDB) -> None:
    table = control_db.query("SELECT SUM(dur) AS d FROM slice")
    assert isinstance(table, pa.Table)
    assert table.schema.field("d").type == pa.int64()
    assert table.to_pylist() == [{"d": 3144843000}]  # SELECT SUM(dur) FROM slice (oracle)


def _truncated(tmp_path: Path) -> Path:
    """cpu-only.json cut inside its traceEvents array: the reader keeps 10 of 18 slices and warns."""
    import gzip

    text = gzip.decompress((DATA / "cpu-only.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[:20000])
    return path


def test_a_cache_hit_warns_as_the_first_read(run_cli: Run, tmp_path: Path) -> None:
    cut = _truncated(tmp_path)
    env = {"LAYERSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    runs = [run_cli("query", str(cut), "SELECT COUNT(*) AS n FROM slice", "--format", "csv", env=env)
            for _ in range(2)]
    assert len(list((tmp_path / "cache").iterdir())) == 1  # the second run was a cache hit
    for out in runs:
        assert out.returncode == 0 and out.stdout.splitlines() == ['"n"', "10"], out.stderr
        assert out.stderr.splitlines() == [
            f"WARNING layerscope.trace.chrome_reader: {cut}: trace ends inside the traceEvents array (truncated or "
            "cut mid-event); kept the complete events before the cut"]
    # the same bytes under another name: the warning names the file read now
    copy = tmp_path / "copy.json"
    copy.write_bytes(cut.read_bytes())
    again = run_cli("query", str(copy), "SELECT 1", "--format", "csv", env=env)
    assert f"{copy}: trace ends inside" in again.stderr and f"{cut}:" not in again.stderr
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_the_cache_is_keyed_on_the_reader(run_cli: Run, tmp_path: Path) -> None:
    # The same bytes (one empty TracePacket: field 1, length 0) are a Perfetto trace with no slices
    # but not a JSON trace.
    (tmp_path / "empty.pftrace").write_bytes(b"\x0a\x00")
    (tmp_path / "empty.json").write_bytes(b"\x0a\x00")
    env = {"LAYERSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    first = run_cli("query", str(tmp_path / "empty.pftrace"), "SELECT COUNT(*) AS n FROM slice", "--format", "csv",
                    env=env)
    assert first.returncode == 0 and first.stdout.splitlines() == ['"n"', "0"], first.stderr
    second = run_cli("query", str(tmp_path / "empty.json"), "SELECT COUNT(*) AS n FROM slice", env=env)
    assert second.returncode == 2 and second.stderr.startswith(
        f"error: {str(tmp_path / 'empty.json')!r} is not a JSON trace"), second.stderr
    assert content_key(tmp_path / "empty.json") != content_key(tmp_path / "empty.pftrace")
    assert content_key(tmp_path / "empty.json", "perfetto") == content_key(tmp_path / "empty.pftrace")


def test_stale_temporaries_are_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os
    import sys
    import time

    cache = tmp_path / "cache"
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(cache))
    cache.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    key = content_key(DATA / "cpu-only.json.gz")
    old = time.time() - 2 * engine.STALE_TMP_S
    # a writer killed mid-write (its pid is gone), a minute ago: removed
    killed = cache / f".{key}.{dead_pid}.abc123"
    killed.mkdir()
    (killed / "slice.parquet").write_bytes(b"PAR1 half written")
    os.utime(killed, (old, old))
    # a writer of this process, still running: kept; so is a file of someone else's
    running = cache / f".{key}.{os.getpid()}.def456"
    running.mkdir()
    os.utime(running, (old, old))
    other = cache / ".notes.txt"
    other.write_text("mine")
    os.utime(other, (old, old))
    # a temporary of a process that is gone but only just written: kept (a moment's grace)
    fresh = cache / f".{key}.{dead_pid}.ghi789"
    fresh.mkdir()
    # one so old that its owner no longer matters (another host sharing the directory)
    ancient = cache / f".{key}.1.jkl012"
    ancient.mkdir()
    very_old = time.time() - engine.ORPHAN_TMP_S - 60
    os.utime(ancient, (very_old, very_old))
    with TraceDB(DATA / "cpu-only.json.gz") as db:
        assert db.scalar("SELECT COUNT(*) FROM slice") == 18
    assert not killed.exists() and not ancient.exists()
    assert running.is_dir() and fresh.is_dir() and other.read_text() == "mine"
    assert (cache / key / "meta.json").is_file()


def test_a_cache_hit_names_the_file_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "copy.json.gz"
    copy.write_bytes((DATA / "cpu-only.json.gz").read_bytes())
    with TraceDB(DATA / "cpu-only.json.gz") as db:
        assert db.metadata["source"] == str(DATA / "cpu-only.json.gz")
    with TraceDB(copy) as db:
        assert db.metadata["source"] == str(copy)

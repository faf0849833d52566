"""``layerscope query`` / ``analyze`` / ``compare`` as a user runs them (layerscope/cli/analyze.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
SAMPLED = str(DATA / "gpu-sampled-rank0.json.gz")


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAYERSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def test_query_formats(run_cli: Callable[..., object], tmp_path: Path) -> None:
    sql = "SELECT category, COUNT(*) AS n FROM slice WHERE category = 'kernel' GROUP BY category"
    out = run_cli("query", SAMPLED, sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"category": "kernel", "n": 1154}]  # perfetto-oracle
    csv = run_cli("query", SAMPLED, sql, "--format", "csv")
    assert csv.stdout.splitlines() == ['"category","n"', '"kernel",1154']
    q = tmp_path / "q.sql"
    q.write_text("SELECT COUNT(*) AS slices FROM slices")
    table = run_cli("query", SAMPLED, "--file", str(q), "--no-cache")
    assert table.returncode == 0 and "4811" in table.stdout


def test_query_errors_exit_2(run_cli: Callable[..., object], tmp_path: Path) -> None:
    bad = run_cli("query", SAMPLED, "SELECT * FROM nope")
    assert bad.returncode == 2 and "query failed" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_cli("query", str(tmp_path / "none.json"), "SELECT 1")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("not a trace")
    assert run_cli("query", str(junk), "SELECT 1").returncode == 2
    assert run_cli("query", SAMPLED, "SELECT 1", "--format", "xml").returncode == 2


def test_analyze_json_and_csv(run_cli: Callable[..., object], tmp_path: Path) -> None:
    out = run_cli("analyze", SAMPLED, "--json", "--csv", str(tmp_path / "csv"), "--threshold-ms", "500")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["summary"][0]["kernels"] == 1154
    assert {r["direction"]: r["count"] for r in doc["memory_ops"]} == {"DtoD": 8, "DtoH": 8, "HtoD": 24, "memset": 10}
    assert [e["name"] for e in doc["major_events"]] == ["PyTorch Profiler (0)", "ProfilerStep#551",
                                                         "ProfilerStep#552"]
    assert (tmp_path / "csv" / "category_time.csv").is_file()
    text = run_cli("analyze", SAMPLED, "--rows", "3")
    assert text.returncode == 0 and "memory_ops" in text.stdout


def test_compare_commands(run_cli: Callable[..., object], tmp_path: Path) -> None:
    a, b = str(DATA / "gpu-training-control.json.gz"), str(DATA / "gpu-training-test.json.gz")
    out = run_cli("compare", a, b, "--json")
    assert out.returncode == 0, out.stderr
    summary = {r["metric"]: r for r in json.loads(out.stdout)["summary"]}
    assert (summary["kernel_count"]["a"], summary["kernel_count"]["b"]) == (8568, 9852)
    sim = run_cli("compare", "--sim", SAMPLED, "--real", SAMPLED, "--iterations", "1", "--json")
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["summary"]["median_abs_error"] == 0.0
    assert run_cli("compare", a).returncode == 2
    assert run_cli("compare", a, "--sim", a).returncode == 2


Run = Callable[..., subprocess.CompletedProcess[str]]
CPU = str(DATA / "cpu-only.json.gz")
COUNT = "SELECT COUNT(*) AS n FROM slice"


def _error_line(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 with one ``error:`` line on stderr that says each of ``needles``; nothing on stdout."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("error: "), out.stderr
    for needle in needles:
        assert needle in out.stderr
    assert out.stdout == ""


def test_query_json_flag_is_format_json(run_cli: Run) -> None:
    sql = "SELECT name, dur FROM slice ORDER BY ts, id LIMIT 3"
    flag, fmt = run_cli("query", CPU, sql, "--json"), run_cli("query", CPU, sql, "--format", "json")
    assert flag.returncode == 0 and flag.stdout == fmt.stdout and len(json.loads(flag.stdout)) == 3
    _error_line(run_cli("query", CPU, sql, "--json", "--format", "csv"), "--json", "--format csv")
    # two columns of one name are both kept
    assert json.loads(run_cli("query", CPU, "SELECT 1 AS a, 2 AS a", "--json").stdout) == [{"a": 1, "a_1": 2}]


def test_query_reads_sql_from_a_pipe(run_cli: Run, tmp_path: Path) -> None:
    piped = run_cli("query", CPU, "--format", "csv", input=f"{COUNT}\n")
    assert piped.returncode == 0 and piped.stdout.splitlines() == ['"n"', "18"], piped.stderr
    dash = run_cli("query", CPU, "--file", "-", "--format", "csv", input=COUNT)
    assert dash.returncode == 0 and dash.stdout == piped.stdout, dash.stderr
    _error_line(run_cli("query", CPU, "SELECT 1", "--file", "-", input=COUNT), "not both")


@pytest.mark.parametrize(("args", "stdin", "needle"), [
    (["", "--no-cache"], None, "the SQL argument is empty"),
    (["  \n\t "], None, "the SQL argument is empty"),
    ([], "", "standard input is empty"),
    ([], "   \n", "standard input is empty"),
    (["--file", "-"], "", "standard input is empty"),
])
def test_empty_sql_is_refused(run_cli: Run, args: list[str], stdin: str | None, needle: str) -> None:
    _error_line(run_cli("query", CPU, *args, input=stdin), needle)


def test_sql_files_that_are_not_text(run_cli: Run, tmp_path: Path) -> None:
    latin = tmp_path / "latin1.sql"
    latin.write_bytes("SELECT 'café' AS x".encode("latin-1"))
    _error_line(run_cli("query", CPU, "--file", str(latin)), repr(str(latin)), "not UTF-8")
    _error_line(run_cli("query", CPU, "--file", str(tmp_path)), repr(str(tmp_path)))
    _error_line(run_cli("query", CPU, "--file", str(tmp_path / "none.sql")), "none.sql", "No such file")
    # a UTF-8 file with a byte-order mark is fine
    bom = tmp_path / "bom.sql"
    bom.write_bytes("\ufeffSELECT 'café' AS x".encode())
    assert json.loads(run_cli("query", CPU, "--file", str(bom), "--json").stdout) == [{"x": "café"}]


def test_query_results_of_any_type(run_cli: Run) -> None:
    sql = ("SELECT TIMESTAMP '2020-01-02 03:04:05' AS t, 1.5::DECIMAL(10, 2) AS d, [1, 2] AS l, {'a': 1} AS s, "
           "'ab'::BLOB AS b, 'inf'::DOUBLE AS big")
    out = run_cli("query", CPU, sql, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"t": "2020-01-02T03:04:05", "d": 1.5, "l": [1, 2], "s": {"a": 1}, "b": "ab",
                                       "big": None}]
    csv = run_cli("query", CPU, sql, "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout.splitlines()[1] == '2020-01-02 03:04:05.000000,1.50,"[1, 2]","{""a"": 1}","""ab""",inf'


@pytest.mark.parametrize("command", [["analyze", CPU], ["compare", CPU, CPU]])
@pytest.mark.parametrize("rows", ["-3", "0"])
def test_rows_must_be_positive(run_cli: Run, command: list[str], rows: str) -> None:
    _error_line(run_cli(*command, "--rows", rows), f"--rows: {rows} is not allowed")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
def test_threshold_must_be_a_duration(run_cli: Run, value: str) -> None:
    _error_line(run_cli("analyze", CPU, "--threshold-ms", value), "--threshold-ms:", "finite number >= 0")


def test_csv_never_overwrites_the_input(run_cli: Run, tmp_path: Path) -> None:
    trace = tmp_path / "in.json.gz"
    trace.write_bytes((DATA / "cpu-only.json.gz").read_bytes())
    before = trace.read_bytes()
    _error_line(run_cli("analyze", str(trace), "--csv", str(trace)), "is the input trace")
    _error_line(run_cli("analyze", str(trace), "--csv", str(tmp_path / ".." / tmp_path.name / "in.json.gz")),
                "is the input trace")
    assert trace.read_bytes() == before
    # another file is not a directory either, and stays as it was
    notes = tmp_path / "notes.txt"
    notes.write_text("keep")
    _error_line(run_cli("analyze", str(trace), "--csv", str(notes)), "exists and is not a directory")
    assert notes.read_text() == "keep"
    _error_line(run_cli("analyze", str(trace), "--csv", "/proc/layerscope-csv"), "/proc/layerscope-csv")
    ok = run_cli("analyze", str(trace), "--csv", str(tmp_path / "reports"), "--json")
    assert ok.returncode == 0 and (tmp_path / "reports" / "top_ops.csv").is_file(), ok.stderr
    assert trace.read_bytes() == before


#: Names that rich would read as markup or emoji codes.
MARKUP_NAMES = ["[/bold]", "[red]x[/red]", ":x:", "[link=file:///etc/passwd]y[/link]", "end\\"]


def _markup_trace(path: Path, category: str = "kernel", scale: float = 1.0) -> Path:
    events = []
    for i, name in enumerate(MARKUP_NAMES):
        events.append({"ph": "X", "cat": category, "name": name, "pid": 1, "tid": 2, "ts": 10 * i,
                       "dur": (i + 1) * scale})
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": 10 * i,
                       "dur": (i + 2) * scale})
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _literally(stdout: str) -> None:
    for name in MARKUP_NAMES:
        assert name in stdout, (name, stdout)
    assert "❌" not in stdout


def test_names_print_literally(run_cli: Run, tmp_path: Path) -> None:
    trace = str(_markup_trace(tmp_path / "markup.json"))
    other = str(_markup_trace(tmp_path / "other.json", scale=2.0))
    query = run_cli("query", trace, "SELECT DISTINCT name, name AS \"[bold]col[/bold]\" FROM slice")
    assert query.returncode == 0, query.stderr
    _literally(query.stdout)
    assert "[bold]col[/bold]" in query.stdout
    analyze = run_cli("analyze", trace)
    assert analyze.returncode == 0, analyze.stderr
    _literally(analyze.stdout)
    compare = run_cli("compare", trace, other)
    assert compare.returncode == 0, compare.stderr
    _literally(compare.stdout)
    sim = str(_markup_trace(tmp_path / "sim.json", category="gemm"))
    sim_real = run_cli("compare", "--sim", sim, "--real", other)
    assert sim_real.returncode == 0, sim_real.stderr
    _literally(sim_real.stdout)


def _capture_like(path: Path) -> Path:
    """A layerscope capture as compare tells one: its ``layerscope`` object and its ``prefill`` range."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "prefill", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "user_annotation", "name": "layers.0.mlp", "pid": 1, "tid": 1, "ts": 1, "dur": 50}]
    path.write_text(json.dumps({"traceEvents": events, "layerscope": {"model": "tiny"}}))
    return path


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from layerscope.app.simulate import SimulateRequest, run_simulation

    out = tmp_path_factory.mktemp("sim")
    paths = {suffix: run_simulation(SimulateRequest(model="llama-3.2-1b", hardware="h100-sxm", engines=1,
                                                    out=out / f"sim{suffix}")).trace_path
             for suffix in (".json.gz", ".pftrace")}
    return {suffix: path for suffix, path in paths.items() if path is not None}


@pytest.mark.parametrize("suffix", [".json.gz", ".pftrace"])
def test_compare_refuses_swapped_traces(run_cli: Run, tmp_path: Path, simulated: dict[str, Path],
                                        suffix: str) -> None:
    sim = str(simulated[suffix])
    capture = str(_capture_like(tmp_path / "captured.json"))
    _error_line(run_cli("compare", "--sim", capture, "--real", sim), "look swapped",
                f"--sim {sim!r} --real {capture!r}", "is a layerscope capture")
    # a trace from elsewhere given as --sim, the simulation as --real: swapped too
    _error_line(run_cli("compare", "--sim", CPU, "--real", sim), "look swapped", "not a layerscope simulation")
    # a capture is not a simulation, whatever --real is
    _error_line(run_cli("compare", "--sim", capture, "--real", capture), "is a layerscope capture")


def test_compare_with_nothing_joined_is_an_error(run_cli: Run, simulated: dict[str, Path]) -> None:
    sim = str(simulated[".json.gz"])
    _error_line(run_cli("compare", "--sim", sim, "--real", CPU), "no op of the simulated trace", "0 in both")
    _error_line(run_cli("compare", "--sim", sim, "--real", str(simulated[".pftrace"])),
                "is itself a layerscope simulation")


def _table_rows(stdout: str, title: str) -> list[list[str]]:
    """The cells of the rich table titled ``title…`` in ``stdout``, header first (box-drawing rows only)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith(("┃", "│")):
            rows.append([cell.strip() for cell in line.strip("┃│").replace("┃", "│").split("│")])
        elif line.startswith("└"):
            break
    return rows


def test_analyze_prints_times_in_readable_units_and_shares_as_percentages(run_cli: Run) -> None:
    """The human tables: no ``_ms``/``_us`` column of raw numbers; each time in the unit that suits it (the
    sampled trace's ProfilerStep#552 slice, 622.928 ms, and its 3.367 s profiler span), shares, idle and
    bandwidths in words; the JSON keeps the columns and numbers."""
    out = run_cli("analyze", SAMPLED, "--rows", "50")
    assert out.returncode == 0, out.stderr
    assert "_ms" not in out.stdout and "_us" not in out.stdout and "e+06" not in out.stdout
    top = _table_rows(out.stdout, "top_ops")
    assert top[0] == ["name", "category", "count", "total", "mean", "max"]
    cells = {row[0]: row for row in top[1:]}
    assert cells["ProfilerStep#552"][3:] == ["622.928 ms", "622.928 ms", "622.928 ms"]
    assert cells["PyTorch Profiler (0)"][3] == "3.367 s"
    assert all(row[4].endswith((" s", " ms", " µs", " ns")) for row in top[1:])
    category = _table_rows(out.stdout, "category_time")
    assert category[0][-1] == "share" and all(row[-1].endswith("%") for row in category[1:])
    idle = _table_rows(out.stdout, "gpu_idle")
    assert idle[0][-2:] == ["idle", "idle %"] and idle[1][-1] == "55.2%"
    memory = _table_rows(out.stdout, "memory_ops")
    assert memory[0][-2:] == ["bytes", "bandwidth"] and all(row[-1].endswith("B/s") for row in memory[1:])
    doc = json.loads(run_cli("analyze", SAMPLED, "--json").stdout)
    assert {"total_ms", "mean_us", "max_us"} <= set(doc["top_ops"][0])


def test_compare_shows_errors_and_deltas_as_percentages(run_cli: Run) -> None:
    a, b = str(DATA / "gpu-training-control.json.gz"), str(DATA / "gpu-training-test.json.gz")
    out = run_cli("compare", a, b, "--rows", "5")
    assert out.returncode == 0, out.stderr
    summary = {row[0]: row for row in _table_rows(out.stdout, "summary")}
    assert summary["metric"] == ["metric", "a", "b", "delta", "delta %"]
    # kernel_count 8568 -> 9852: +15.0%; the span in ms, as its metric says.
    assert summary["kernel_count"][1:] == ["8568", "9852", "1284", "+15.0%"]
    assert summary["span_ms"][1].endswith(" ms") and summary["span_ms"][4].endswith("%")
    sim = run_cli("compare", "--sim", SAMPLED, "--real", SAMPLED, "--iterations", "1", "--rows", "5")
    assert sim.returncode == 0, sim.stderr
    ops = _table_rows(sim.stdout, "predicted vs measured")
    header = ops[0]
    assert header[header.index("error")] == "error" and "predicted" in header and "measured" in header
    assert all(row[header.index("error")] == "+0.0%" and row[header.index("abs_error")] == "0.0%"
               for row in ops[1:])
    assert "median |error| 0.0%" in sim.stdout

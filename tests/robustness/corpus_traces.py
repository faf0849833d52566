"""Traces for query / analyze / compare, and SQL: hostile files, bombs, file access from SQL, bad options."""

from __future__ import annotations

from .harness import Case
from .inputs import (
    DIR,
    FIFO,
    deep_args_trace,
    gzip_bomb,
    gzip_of,
    nested,
    random_bytes,
    trace_file,
    truncated_gzip,
)
from .inputs import TRACES as TRACE_DIR

REAL = "real.json.gz"
"""cpu-only.json.gz from tests/data/traces: a 30-event Kineto trace."""
SIM = "sim.json"
"""tests/data/golden/tiny_layer_trace.json: a layerscope simulate trace."""

GOOD = {REAL: lambda: trace_file("cpu-only.json.gz"), SIM: lambda: trace_file("tiny_layer_trace.json")}

#: The bad trace files, each tried by query, analyze and compare (name → content).
BAD_TRACES: dict[str, object] = {
    "empty-json": ("t.json", b""),
    "empty-json-gz": ("t.json.gz", b""),
    "empty-gzip-member": ("t.json.gz", lambda: gzip_of(b"")),
    "empty-pftrace": ("t.pftrace", b""),
    "random-json": ("t.json", random_bytes()),
    "random-json-gz": ("t.json.gz", random_bytes()),
    "random-pftrace": ("t.pftrace", random_bytes()),
    "not-json": ("t.json", b"hello, this is not a trace\n"),
    "json-number": ("t.json", b"42"),
    "json-string": ("t.json", b'"trace"'),
    "json-null": ("t.json", b"null"),
    "traceEvents-number": ("t.json", b'{"traceEvents": 5}'),
    "traceEvents-object": ("t.json", b'{"traceEvents": {"a": 1}}'),
    "traceEvents-string": ("t.json", b'{"traceEvents": "[]"}'),
    "deep-args-5000": ("t.json", lambda: deep_args_trace(5000)),
    "deep-list-200k": ("t.json", nested("[", 200_000)),
    "deep-list-gz": ("t.json.gz", lambda: gzip_of(nested("[", 200_000))),
    "gz-bomb-whitespace": ("t.json.gz", lambda: gzip_bomb(256)),
    "gz-bomb-zeros": ("t.json.gz", lambda: gzip_bomb(256, b"0")),
}


def trace_cases(command: str, name: str, content: object) -> Case:
    file, data = content  # type: ignore[misc]
    if command == "query":
        argv: tuple[str, ...] = ("query", file, "select count(*) from slice")
    elif command == "analyze":
        argv = ("analyze", file)
    else:
        argv = ("compare", REAL, file)
    files = {file: data, **({REAL: GOOD[REAL]} if command == "compare" else {})}
    return Case(f"trace-{name}-{command}", argv, files, (file,))  # type: ignore[arg-type]


def q(case_id: str, sql: str, *expect: str, forbid: tuple[str, ...] = ()) -> Case:
    """``query REAL SQL`` on the real trace."""
    return Case(f"sql-{case_id}", ("query", REAL, sql), {REAL: GOOD[REAL], "x.csv": b"a,b\n1,2\n"}, expect,
                stdout_forbid=forbid)


PASSWD = ("root:",)

CASES: list[Case] = [
    # Positive controls.
    Case("trace-ok-query", ("query", REAL, "select count(*) as n from slice", "--format", "json"), {REAL: GOOD[REAL]},
         code=0, stdout_json=True),
    Case("trace-ok-analyze", ("analyze", REAL, "--json"), {REAL: GOOD[REAL]}, code=0, stdout_json=True),
    Case("trace-ok-compare", ("compare", REAL, SIM, "--json"), GOOD, code=0, stdout_json=True),
    Case("trace-ok-query-sim-pftrace", ("query", "sim.pftrace", "select count(*) from slice"),
         {"sim.pftrace": lambda: trace_file("tiny_layer_trace.pftrace")}, code=0),
    # Every bad trace file through each reader.
    *(trace_cases(command, name, content) for name, content in BAD_TRACES.items()
      for command in ("query", "analyze", "compare")),
    # The cache must not let one file's result stand for another's (same bytes, another format).
    Case("trace-cached-empty-pftrace-then-json", ("query", "e.json", "select count(*) from slice"),
         {"e.json": b"", "e.pftrace": b""}, ("e.json",), before=(("query", "e.pftrace", "select 1"),)),
    # A truncated trace is read as far as it goes, with a warning: on the second read (from the cache) too.
    *(Case(f"trace-ok-truncated-gzip-warns-{command}", (command, "t.json.gz", *args),
           {"t.json.gz": lambda: truncated_gzip(TRACE_DIR / "cpu-only.json.gz")}, code=0, stderr_expect=("truncated",))
      for command, args in (("query", ("select count(*) from slice",)), ("analyze", ()))),
    Case("trace-ok-cached-truncated-warns-again", ("analyze", "t.json.gz"),
         {"t.json.gz": lambda: truncated_gzip(TRACE_DIR / "cpu-only.json.gz")}, code=0, stderr_expect=("truncated",),
         before=(("analyze", "t.json.gz"),)),
    # Paths that are not a trace.
    Case("trace-missing-query", ("query", "nothere.json", "select 1"), {}, ("nothere.json",)),
    Case("trace-missing-analyze", ("analyze", "nothere.json.gz"), {}, ("nothere.json.gz",)),
    Case("trace-missing-compare", ("compare", REAL, "nothere.json"), {REAL: GOOD[REAL]}, ("nothere.json",)),
    Case("trace-directory-query", ("query", "tdir", "select 1"), {"tdir": DIR}, ("tdir",)),
    Case("trace-directory-analyze", ("analyze", "tdir"), {"tdir": DIR}, ("tdir",)),
    Case("trace-unknown-suffix-noise", ("analyze", "t.txt"), {"t.txt": random_bytes()}, ("t.txt",)),
    Case("trace-fifo", ("analyze", "t.json"), {"t.json": FIFO}, ("t.json",)),
    Case("trace-open-missing", ("open", "nothere.json"), {}, ("nothere.json",)),
    Case("trace-open-directory", ("open", "tdir"), {"tdir": DIR}, ("tdir",)),
    # SQL that reaches outside the trace: file reads, writes, new databases, extensions, settings.
    q("read-csv-passwd", "select * from read_csv('/etc/passwd')", forbid=PASSWD),
    q("read-csv-auto-passwd", "select * from read_csv_auto('/etc/passwd', header=false)", forbid=PASSWD),
    q("replacement-scan-passwd", "select * from '/etc/passwd'", forbid=PASSWD),
    q("read-text", "select content from read_text('/etc/passwd')", forbid=PASSWD),
    q("read-blob", "select content from read_blob('/etc/hostname')"),
    q("read-json", "select * from read_json('/etc/os-release')"),
    q("read-parquet", "select * from read_parquet('/etc/passwd')"),
    q("sniff-csv", "select * from sniff_csv('/etc/passwd')", forbid=PASSWD),
    q("glob-root", "select * from glob('/root/*')"),
    q("glob-etc", "select * from glob('/etc/*')", forbid=("/etc/passwd",)),
    q("read-local-csv", "select * from read_csv('x.csv')"),
    q("copy-to-file", "COPY (SELECT 1) TO 'out.csv'"),
    q("copy-table-to-parquet", "COPY slice TO 'out.parquet' (FORMAT parquet)"),
    q("export-database", "EXPORT DATABASE 'dump'"),
    q("attach-new-db", "ATTACH 'x.db' AS x"),
    q("attach-memory-then-copy", "ATTACH ':memory:' AS m; COPY (SELECT 1) TO 'out.csv'"),
    q("install-httpfs", "INSTALL httpfs"),
    q("load-httpfs", "LOAD httpfs"),
    q("set-external-access", "SET enable_external_access=true"),
    q("reset-external-access", "RESET enable_external_access"),
    q("set-autoload", "SET autoload_known_extensions=true"),
    q("set-unsigned-extensions", "SET allow_unsigned_extensions=true"),
    q("pragma-external-access", "PRAGMA enable_external_access=true"),
    q("select-then-copy", "SELECT 1; COPY (SELECT 2) TO 'out.csv'"),
    # SQL that is not a query of these tables.
    q("empty", "", "sql"),
    q("whitespace", "   \n ", "sql"),
    q("semicolon", ";", "sql"),
    q("syntax-error", "SELEC 1", "selec"),
    q("unknown-table", "select * from no_such_table", "no_such_table"),
    q("unknown-column", "select no_such_col from slice", "no_such_col"),
    q("bad-function", "select no_such_fn(1)", "no_such_fn"),
    q("division-type-error", "select 'a' + 1"),
    Case("sql-file-non-utf8", ("query", REAL, "--file", "bad.sql"), {REAL: GOOD[REAL], "bad.sql": random_bytes()},
         ("bad.sql",)),
    Case("sql-file-missing", ("query", REAL, "--file", "nothere.sql"), {REAL: GOOD[REAL]}, ("nothere.sql",)),
    Case("sql-file-directory", ("query", REAL, "--file", "sqldir"), {REAL: GOOD[REAL], "sqldir": DIR}, ("sqldir",)),
    Case("sql-file-empty", ("query", REAL, "--file", "empty.sql"), {REAL: GOOD[REAL], "empty.sql": b""}, ("sql",)),
    Case("sql-file-and-argument", ("query", REAL, "select 1", "--file", "q.sql"),
         {REAL: GOOD[REAL], "q.sql": b"select 2"}, ("--file",)),
    Case("sql-stdin-empty", ("query", REAL), {REAL: GOOD[REAL]}, ("sql",)),
    Case("sql-format-unknown", ("query", REAL, "select 1", "--format", "xml"), {REAL: GOOD[REAL]}, ("xml",)),
    # analyze / compare options.
    Case("analyze-rows-negative", ("analyze", REAL, "--rows", "-3"), {REAL: GOOD[REAL]}, ("--rows",)),
    Case("analyze-rows-word", ("analyze", REAL, "--rows", "all"), {REAL: GOOD[REAL]}, ("--rows",)),
    Case("analyze-threshold-nan", ("analyze", REAL, "--threshold-ms", "nan"), {REAL: GOOD[REAL]}, ("--threshold-ms",)),
    Case("analyze-threshold-inf", ("analyze", REAL, "--threshold-ms", "inf"), {REAL: GOOD[REAL]}, ("--threshold-ms",)),
    Case("analyze-threshold-minus-inf", ("analyze", REAL, "--threshold-ms", "-inf"), {REAL: GOOD[REAL]},
         ("--threshold-ms",)),
    Case("analyze-threshold-negative", ("analyze", REAL, "--threshold-ms", "-1"), {REAL: GOOD[REAL]},
         ("--threshold-ms",)),
    Case("analyze-threshold-word", ("analyze", REAL, "--threshold-ms", "slow"), {REAL: GOOD[REAL]},
         ("--threshold-ms",)),
    Case("compare-rows-negative", ("compare", REAL, SIM, "--rows", "-1"), GOOD, ("--rows",)),
    Case("compare-one-trace", ("compare", REAL), {REAL: GOOD[REAL]}, ("trace",)),
    Case("compare-nothing", ("compare",), {}, ("trace",)),
    Case("compare-sim-only", ("compare", "--sim", SIM), GOOD, ("--real",)),
    Case("compare-sim-and-positional", ("compare", REAL, "--sim", SIM, "--real", REAL), GOOD, ("--sim",)),
    Case("compare-sim-real-swapped", ("compare", "--sim", REAL, "--real", SIM), GOOD, ("--sim",)),
    Case("compare-sim-real-same-sim", ("compare", "--sim", SIM, "--real", SIM), GOOD, ("real",)),
    Case("compare-iterations-zero", ("compare", "--sim", SIM, "--real", REAL, "--iterations", "0"), GOOD,
         ("iterations",)),
    Case("compare-phase-unknown", ("compare", "--sim", SIM, "--real", REAL, "--phase", "training"), GOOD,
         ("training",)),
]

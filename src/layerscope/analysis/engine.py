"""DuckDB over trace tables, named and shaped like Perfetto trace_processor's.

    with TraceDB("trace.json.gz") as db:
        top = db.query("SELECT name, COUNT(*) AS launches, SUM(dur)/1e6 AS total_ms "
                       "FROM slices GROUP BY name ORDER BY total_ms DESC LIMIT 50")

Tables and views (``ts``/``dur`` in ns): ``slice`` (and its aliases ``slices``; ``cat`` and
``slice_id`` alias ``category`` and ``id``), ``track``, ``thread_track``, ``process_track``,
``counter_track``, ``thread``, ``process``, ``counter``, ``flow``, ``args``. ``args`` is a view
that expands each arg set's JSON on demand (``flat_key``/``key`` are ``args.<path>`` for JSON
args and ``debug.<name>`` for protobuf debug annotations, as in trace_processor).

Cache: the first load of a file writes its tables as Parquet under ``$LAYERSCOPE_CACHE_DIR`` (or
``~/.cache/layerscope/traces``) in a directory named by what determines the tables: the SHA-256 of
the file's bytes (read as a stream), the reader chosen for it (by suffix or content) and
:data:`CACHE_VERSION`. The reader's warnings are kept with the tables and logged again on a cache
hit. A cache is written to a temporary directory (named after the writing process) and renamed
into place, so a crashed writer never leaves a half cache; temporaries whose writer is gone are
removed when the cache is next opened. Later loads of the same bytes as the same format read the
Parquet.

Security: the SQL is the user's, the tables are the trace's. Each connection turns off file and
network access, extension installing and loading, and Python replacement scans, then locks its
configuration (``lock_configuration``), so no query can read or write a file, attach a database,
load an extension or turn any of it back on. Only the registered trace tables and the views over
them are reachable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from layerscope.errors import AnalysisError, TraceError
from layerscope.trace.readers import format_for, read_trace
from layerscope.trace.tables import SCHEMAS, TraceTables, read_parquet
from layerscope.units import note_input, pid_alive

log = logging.getLogger(__name__)

#: Bump when the table layout or the cache key changes so old caches are ignored.
#: 2: keyed on the reader too; the reader's log records are kept.
CACHE_VERSION = 2

#: A cache temporary of a process that is gone is removed after this long (a crashed writer's
#: leftovers); one whose owner cannot be told (another host sharing the directory) after a day.
STALE_TMP_S = 60.0
ORPHAN_TMP_S = 24 * 3600.0

#: Run on each connection before any user SQL: no file or network access (``read_csv``,
#: ``COPY … TO``, ``ATTACH``, ``glob``), no extension install/load, no scans of Python variables,
#: then the configuration is locked so that ``SET``/``RESET``/``PRAGMA`` cannot undo any of it.
_LOCKDOWN = (
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET python_enable_replacements = false",
    "SET lock_configuration = true",
)

_VIEWS = """
CREATE VIEW slice AS SELECT id, ts, dur, track_id, category, name, depth, parent_id, arg_set_id,
    thread_ts, thread_dur, category AS cat, id AS slice_id FROM __slice;
CREATE VIEW slices AS SELECT * FROM slice;
CREATE VIEW thread AS SELECT utid, utid AS id, tid, name, upid, NULL::BIGINT AS start_ts,
    NULL::BIGINT AS end_ts, (tid = (SELECT pid FROM __process p WHERE p.upid = t.upid)) AS is_main_thread,
    sort_index FROM __thread t;
CREATE VIEW process AS SELECT upid, upid AS id, pid, name, NULL::BIGINT AS start_ts,
    NULL::BIGINT AS end_ts, NULL::BIGINT AS parent_upid, NULL::BIGINT AS uid, NULL::VARCHAR AS cmdline,
    NULL::BIGINT AS arg_set_id, labels, sort_index FROM __process;
CREATE VIEW track AS SELECT id, name, type, parent_id, type AS classification, utid, upid, unit
    FROM __track;
CREATE VIEW thread_track AS SELECT id, name, type, parent_id, utid FROM __track WHERE type = 'thread';
CREATE VIEW process_track AS SELECT id, name, type, parent_id, upid FROM __track
    WHERE type IN ('process', 'async');
CREATE VIEW counter_track AS SELECT id, name, type, parent_id, unit, NULL::VARCHAR AS description,
    upid FROM __track WHERE type = 'counter';
CREATE VIEW process_counter_track AS SELECT * FROM counter_track WHERE upid IS NOT NULL;
CREATE VIEW counter AS SELECT id, ts, track_id, value, arg_set_id FROM __counter;
CREATE VIEW flow AS SELECT id, slice_out, slice_in, trace_id, arg_set_id FROM __flow;
CREATE VIEW args AS
SELECT a.arg_set_id,
    regexp_replace(replace(substr(t.fullkey, 3), '"', ''), '\\[[0-9]+\\]', '', 'g') AS flat_key,
    replace(substr(t.fullkey, 3), '"', '') AS key,
    CASE WHEN t.type IN ('BIGINT', 'UBIGINT') THEN TRY_CAST(t.atom AS BIGINT)
         WHEN t.type = 'BOOLEAN' THEN CAST(t.atom = 'true' AS BIGINT) END AS int_value,
    CASE WHEN t.type = 'VARCHAR' THEN json_extract_string(t.value, '$') END AS string_value,
    CASE WHEN t.type = 'DOUBLE' THEN TRY_CAST(t.atom AS DOUBLE) END AS real_value,
    CASE t.type WHEN 'BIGINT' THEN 'int' WHEN 'UBIGINT' THEN 'int' WHEN 'DOUBLE' THEN 'real'
         WHEN 'VARCHAR' THEN 'string' WHEN 'BOOLEAN' THEN 'bool' ELSE 'null' END AS value_type,
    CASE WHEN t.type = 'VARCHAR' THEN json_extract_string(t.value, '$')
         ELSE CAST(t.atom AS VARCHAR) END AS display_value
FROM __arg_sets a, json_tree(a.json) t
WHERE t.type NOT IN ('OBJECT', 'ARRAY');
"""


def cache_dir() -> Path:
    """Where trace caches live: ``$LAYERSCOPE_CACHE_DIR`` or ``~/.cache/layerscope/traces``."""
    env = os.environ.get("LAYERSCOPE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "layerscope" / "traces"


def content_key(path: Path, fmt: str | None = None) -> str:
    """The cache key of reading ``path``: SHA-256 of its bytes (streamed), the reader (``fmt``, or
    the one :func:`~layerscope.trace.readers.format_for` picks) and the cache layout version."""
    reader = fmt or format_for(path)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
    except OSError as exc:
        raise TraceError(f"cannot read trace {str(path)!r}: {exc.strerror}") from None
    return f"{digest.hexdigest()}-{reader}-v{CACHE_VERSION}"


#: The prefix of every cache temporary: ``.<key>.<pid>.<random>``.
_TMP = re.compile(r"^\.(?P<key>[^.]+)\.(?P<pid>\d+)\.")


def remove_stale_temporaries(directory: Path, *, now: float | None = None) -> list[Path]:
    """Remove the cache temporaries in ``directory`` left by writers that died mid-write: those of
    a process that no longer runs, older than :data:`STALE_TMP_S`, and any older than
    :data:`ORPHAN_TMP_S`. Returns what was removed; other files are never touched."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    clock = time.time() if now is None else now
    for entry in entries:
        match = _TMP.match(entry.name)
        if match is None:
            continue
        try:
            age_s = clock - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        pid = int(match.group("pid"))
        owner_gone = not pid_alive(pid)
        if not ((owner_gone and age_s > STALE_TMP_S) or age_s > ORPHAN_TMP_S):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        if not path.exists():
            removed.append(path)
            log.info("removed a stale trace-cache temporary %s", path)
    return removed


def _write_cache(tables: TraceTables, target: Path, records: list[dict[str, Any]]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", dir=target.parent))
    try:
        for name, table in tables.tables().items():
            pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
        meta = {"metadata": tables.metadata, "warnings": tables.warnings, "log": records}
        (tmp / "meta.json").write_text(json.dumps(meta, default=str))
        try:
            os.replace(tmp, target)
        except OSError:
            # another process cached the same trace first; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_cache(target: Path) -> dict[str, Any] | None:
    meta_path = target / "meta.json"
    if not meta_path.is_file() or not all((target / f"{n}.parquet").is_file() for n in SCHEMAS):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("log", []), list):
        return None
    return meta


class _ReaderLog(logging.Handler):
    """Keeps the records the trace readers log while one trace is read."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _read_logged(source: Path, fmt: str) -> tuple[TraceTables, list[dict[str, Any]]]:
    """Read ``source``; return its tables and what the reader logged (logger, level, message, and
    whether the message starts with the path, which a cache hit replaces with its own path).

    A warning of the tables that was not logged was below the run's level (an INFO without
    ``-v``): it is kept at INFO, so a verbose cache hit shows it."""
    handler = _ReaderLog()
    trace_log = logging.getLogger("layerscope.trace")
    trace_log.addHandler(handler)
    try:
        tables = read_trace(source, fmt)
    finally:
        trace_log.removeHandler(handler)
    prefix = f"{source}: "
    records = []
    said: set[str] = set()
    for record in handler.records:
        message = record.getMessage()
        said.add(message)
        named = message.startswith(prefix)
        records.append({"logger": record.name, "level": record.levelno, "named": named,
                        "message": message[len(prefix):] if named else message})
    records += [{"logger": "layerscope.trace.readers", "level": logging.INFO, "named": True, "message": warning}
                for warning in tables.warnings if prefix + warning not in said]
    return tables, records


def _replay(records: list[Any], source: Path) -> None:
    """Log a cached read's records again, as the reader logged them, naming ``source``."""
    for record in records:
        if not isinstance(record, dict):
            continue
        level, message = record.get("level"), record.get("message")
        if not isinstance(level, int) or not isinstance(message, str):
            continue
        line = f"{source}: {message}" if record.get("named") else message
        logging.getLogger(str(record.get("logger") or "layerscope.trace")).log(level, "%s", line)


def load_tables(path: str | os.PathLike[str], *, use_cache: bool = True,
                background: list[threading.Thread] | None = None) -> TraceTables:
    """Read a trace (any registered format), through the Parquet cache when allowed.

    With ``background`` (a list), a cache miss appends to it a thread that writes the cache, not
    yet started, so the tables come back as soon as they are parsed: start it when convenient
    (:class:`TraceDB` does once its tables are registered) and join it before relying on the cache.
    """
    source = Path(path)
    if not source.is_file():
        raise TraceError(f"trace {str(source)!r} does not exist or is not a file")
    note_input(source)
    if not use_cache:
        return read_trace(source)
    fmt = format_for(source)
    directory = cache_dir()
    remove_stale_temporaries(directory)
    target = directory / content_key(source, fmt)
    cached = _read_cache(target)
    if cached is not None:
        try:
            tables = {name: read_parquet(target / f"{name}.parquet") for name in SCHEMAS}
        except (OSError, pa.ArrowException) as exc:
            log.warning("ignoring an unreadable trace cache %s: %s", target, exc)
        else:
            metadata = dict(cached.get("metadata") or {})
            metadata["source"] = str(source)  # the file read now, not the one first cached
            _replay(cached.get("log", []), source)
            return TraceTables.from_tables(tables, metadata, list(cached.get("warnings") or []))
    tables_read, records = _read_logged(source, fmt)
    if background is None:
        _write_cache_logged(tables_read, target, records)
    else:
        # Parquet encoding and zstd run in Arrow's C++ without the GIL: it overlaps the queries
        background.append(threading.Thread(target=_write_cache_logged, args=(tables_read, target, records),
                                           name="layerscope-trace-cache"))
    return tables_read


def _write_cache_logged(tables: TraceTables, target: Path, records: list[dict[str, Any]]) -> None:
    try:
        _write_cache(tables, target, records)
    except (OSError, pa.ArrowException) as exc:
        log.warning("could not write the trace cache %s: %s", target, exc)


def _integral_decimals_to_int(table: pa.Table) -> pa.Table:
    """DuckDB's SUM of BIGINT is HUGEINT (a decimal here); trace_processor gives an integer."""
    for i, column_field in enumerate(table.schema):
        if pa.types.is_decimal(column_field.type) and column_field.type.scale == 0:
            try:
                table = table.set_column(i, column_field.name, table.column(i).cast(pa.int64()))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
    return table


class _Opener(threading.Thread):
    """Opens the in-process DuckDB connection in a thread, views included.

    The views are created over empty stand-ins of the tables (same names and schemas);
    registering the real tables later replaces the stand-ins, and DuckDB binds views by name at
    query time. All of it is C++ that needs nothing from the trace, so it overlaps the parse.
    """

    def __init__(self) -> None:
        super().__init__(name="layerscope-duckdb-open", daemon=True)
        self.con: duckdb.DuckDBPyConnection | None = None
        self.error: str = ""

    def run(self) -> None:
        try:
            con = duckdb.connect()
            # SQLite (trace_processor) sorts NULLs first ascending and last descending
            con.execute("SET default_null_order = 'nulls_first_on_asc_last_on_desc'")
            for name, schema in SCHEMAS.items():
                con.register(f"__{name}", schema.empty_table())
            con.execute(_VIEWS)
            # registering the real tables later still works: it needs no setting
            for statement in _LOCKDOWN:
                con.execute(statement)
        except duckdb.Error as exc:
            self.error = str(exc)
            return
        self.con = con


class TraceDB:
    """A trace loaded into an in-process DuckDB, queryable with trace_processor's SQL.

    ``source`` is a trace path (Chrome/Kineto JSON, Perfetto protobuf) or :class:`TraceTables`.
    ``use_cache=False`` skips the Parquet cache. On a cache miss the cache is written in the
    background while the trace is queried; :meth:`close` waits for it. Close it (or use
    ``with``) to free memory.
    """

    def __init__(self, source: str | os.PathLike[str] | TraceTables, *, use_cache: bool = True) -> None:
        self._writers: list[threading.Thread] = []
        # Opening a DuckDB connection and creating the views takes 15-25 ms of C++ without the
        # GIL: it runs in a thread while the trace is read.
        opener = _Opener()
        opener.start()
        try:
            if isinstance(source, TraceTables):
                self.tables = source
            else:
                self.tables = load_tables(source, use_cache=use_cache, background=self._writers)
        except BaseException:
            opener.join()
            if opener.con is not None:
                opener.con.close()
            raise
        opener.join()
        self.metadata: dict[str, Any] = self.tables.metadata
        self.warnings: list[str] = self.tables.warnings
        if opener.con is None:
            self._start_writers_and_join()
            raise AnalysisError(f"cannot open DuckDB: {opener.error}")
        self._con = opener.con
        try:
            for name, table in self.tables.tables().items():
                # scanned in place (zero-copy): a copy into DuckDB's storage costs more at
                # ingest than it saves on the reports; replaces the opener's empty stand-in
                self._con.register(f"__{name}", table)
        except duckdb.Error as exc:
            self._writers.clear()  # the tables may be at fault: no cache of them
            self.close()
            raise AnalysisError(f"cannot load the trace tables into DuckDB: {exc}") from None
        # the Parquet cache is written in the background once the tables are queryable
        for writer in self._writers:
            writer.start()

    def query(self, sql: str) -> pa.Table:
        """Run ``sql`` and return the result as a :class:`pyarrow.Table`."""
        try:
            result = self._con.sql(sql)
        except duckdb.Error as exc:
            raise AnalysisError(f"query failed: {exc}") from None
        if result is None:
            return pa.table({})
        try:
            table = result.to_arrow_table()
        except duckdb.Error as exc:
            raise AnalysisError(f"query failed: {exc}") from None
        return _integral_decimals_to_int(table)

    def records(self, sql: str) -> list[dict[str, Any]]:
        """Run ``sql`` and return the rows as dicts."""
        return self.query(sql).to_pylist()

    def scalar(self, sql: str) -> Any:
        """Run ``sql`` and return the first column of the first row (``None`` if no rows)."""
        table = self.query(sql)
        return table.column(0)[0].as_py() if table.num_rows and table.num_columns else None

    def df(self, sql: str) -> Any:
        """Run ``sql`` and return a pandas DataFrame (needs pandas)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise AnalysisError("TraceDB.df needs pandas; use TraceDB.query for a pyarrow Table") from None
        return self.query(sql).to_pandas()

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The underlying DuckDB connection (for advanced use). Its configuration is locked: no file,
        network or extension access (see the module docstring)."""
        return self._con

    def close(self) -> None:
        self._con.close()
        self._join_writers()

    def _join_writers(self) -> None:
        for writer in self._writers:
            if writer.ident is not None:  # started
                writer.join()
        self._writers.clear()

    def _start_writers_and_join(self) -> None:
        for writer in self._writers:
            writer.start()
        self._join_writers()

    def __enter__(self) -> TraceDB:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def run_query(path: str | os.PathLike[str], sql: str, *, use_cache: bool = True) -> pa.Table:
    """Load the trace at ``path`` and run one SQL query on it."""
    with TraceDB(path, use_cache=use_cache) as db:
        return db.query(sql)

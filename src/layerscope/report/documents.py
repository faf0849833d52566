"""The documents a report reads: the ``--json`` outputs of the commands, each recognized by its fields and
validated against the command's own result model (``app.schema.RESULTS``), so a report never draws a
document that its command would not have written."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerscope.errors import LayerscopeError
from layerscope.registry import Registry
from layerscope.units import note_input

__all__ = ["KINDS", "MAX_DOCUMENT_BYTES", "Document", "ReportError", "ReportKind", "detect_kind", "load_document",
           "read_json"]

#: Largest input read (a whole-model generate estimate of a large MoE is a few MiB; anything far beyond is not
#: a command's ``--json`` output).
MAX_DOCUMENT_BYTES = 256 << 20


class ReportError(LayerscopeError):
    """A report cannot be made: an input that is not a command's ``--json`` output, or plotly missing."""


@dataclass(frozen=True)
class ReportKind:
    """One kind of document the report reads: which command writes it and how it is drawn."""

    name: str
    """The kind's name (``estimate``, ``compare-traces``, …)."""
    command: str
    """The command line that writes it, for messages (``simulate --json``)."""
    schema: str
    """Its result model's name in :data:`layerscope.app.schema.RESULTS`."""
    keys: frozenset[str]
    """Top-level fields that only this kind's documents have all of."""
    builder: str
    """``module:function`` returning the kind's charts, imported when a report is built (it imports plotly)."""


#: The kinds, in the order a report shows them.
KINDS: Registry[ReportKind] = Registry("report kind", ReportError)
for _kind in (
    ReportKind("estimate", "estimate --json", "estimate", frozenset({"ops", "by_kind", "totals", "memory_bytes"}),
               "layerscope.report.estimate:charts"),
    ReportKind("simulate", "simulate --json", "simulate", frozenset({"sweep", "engines_used", "schedule"}),
               "layerscope.report.simulate:charts"),
    ReportKind("validate", "validate --json", "validate", frozenset({"phases", "machine_probes", "estimate"}),
               "layerscope.report.validate:charts"),
    ReportKind("compare", "compare --sim S --real R --json", "compare",
               frozenset({"summary", "ops", "only_sim", "only_real"}), "layerscope.report.compare:charts"),
    ReportKind("compare-traces", "compare A B --json", "compare",
               frozenset({"summary", "by_name", "by_category"}), "layerscope.report.compare:trace_charts"),
    ReportKind("plan", "plan --json", "plan", frozenset({"plans", "failures", "objective"}),
               "layerscope.report.plan:charts"),
    ReportKind("serving", "serving --json", "serving", frozenset({"metrics", "kv_capacity_tokens", "scheduler"}),
               "layerscope.report.serving:charts"),
):
    KINDS.add(_kind.name, _kind)


@dataclass(frozen=True)
class Document:
    """One input: its path, its kind and its content as its result model dumps it (defaults filled in)."""

    path: Path
    kind: ReportKind
    data: dict[str, Any]


def read_json(path: Path) -> Any:
    """``path`` parsed as JSON; a missing, unreadable, oversized or malformed file is a :class:`ReportError`
    naming it."""
    if not path.is_file():
        raise ReportError(f"{str(path)!r} does not exist or is not a file")
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise ReportError(f"{str(path)!r} is {size / 2**20:.0f} MiB; a command's --json output is at most "
                              f"{MAX_DOCUMENT_BYTES >> 20} MiB")
        text = path.read_bytes()
    except OSError as exc:
        raise ReportError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    note_input(path)
    try:
        return json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ReportError(f"{str(path)!r} is not UTF-8 text (a command's --json output is)") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{str(path)!r} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise ReportError(f"{str(path)!r} nests too deeply to be a command's --json output") from None


def detect_kind(data: Any, path: Path) -> ReportKind:
    """The kind whose fields ``data`` has (:attr:`ReportKind.keys`); otherwise a :class:`ReportError` listing the
    kinds the report reads."""
    readable = ", ".join(kind.command for kind in KINDS.values())
    if not isinstance(data, dict):
        raise ReportError(f"{str(path)!r} holds a JSON {type(data).__name__}, not an object; the report reads the "
                          f"--json output of: {readable}")
    found = [kind for kind in KINDS.values() if kind.keys <= data.keys()]
    if len(found) != 1:
        keys = ", ".join(sorted(map(str, data))[:12]) or "none"
        raise ReportError(f"{str(path)!r} is not the --json output of a command the report reads ({readable}); "
                          f"its top-level fields: {keys}")
    return found[0]


def _validation_message(exc: Any) -> str:
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(top level)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


def load_document(path: str | os.PathLike[str]) -> Document:
    """Read ``path``, recognize its kind and validate it against its command's result model."""
    from pydantic import ValidationError

    from layerscope.app.schema import result_model

    source = Path(path)
    data = read_json(source)
    kind = detect_kind(data, source)
    model = result_model(kind.schema)
    try:
        result = model.model_validate(data)
    except ValidationError as exc:
        raise ReportError(f"{str(source)!r} looks like `{kind.command}` output but is not valid: "
                          f"{_validation_message(exc)}") from None
    dumped = result.model_dump(mode="json")
    return Document(source, kind, dumped if isinstance(dumped, dict) else {})

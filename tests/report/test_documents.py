"""Recognizing and validating the commands' --json outputs (``report/documents.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerscope.errors import LayerscopeError
from layerscope.report import KINDS, ReportError, load_document
from layerscope.report.documents import detect_kind


def test_report_error_is_a_layerscope_error() -> None:
    assert issubclass(ReportError, LayerscopeError)


def test_every_kind_names_a_result_schema_and_unique_keys() -> None:
    from layerscope.app.schema import RESULTS

    for kind in KINDS.values():
        assert kind.schema in RESULTS
    for a in KINDS.values():
        for b in KINDS.values():
            assert a is b or not a.keys <= b.keys, (a.name, b.name)


@pytest.mark.parametrize(("fixture", "kind"), [
    ("estimate_json", "estimate"), ("generate_json", "estimate"), ("simulate_json", "simulate"),
    ("plan_json", "plan"), ("serving_json", "serving"), ("compare_json", "compare"),
    ("compare_traces_json", "compare-traces"),
])
def test_real_outputs_are_recognized(request: pytest.FixtureRequest, fixture: str, kind: str) -> None:
    path = request.getfixturevalue(fixture)
    doc = load_document(path)
    assert doc.kind.name == kind and doc.path == path
    raw = json.loads(path.read_text())
    assert set(raw) <= set(doc.data)  # the model's dump: every field given, defaults filled in


def test_an_unknown_document_names_what_the_report_reads(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"hello": 1, "world": [2]}))
    with pytest.raises(ReportError, match=r"not the --json output of a command the report reads \(estimate --json, "
                       r"simulate --json.*serving --json\); its top-level fields: hello, world"):
        load_document(path)


def test_a_broken_document_names_the_field(estimate_json: Path, tmp_path: Path) -> None:
    doc = json.loads(estimate_json.read_text())
    doc["ops"][3]["time_s"] = "slow"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ReportError, match=r"looks like `estimate --json` output but is not valid: ops\.3\.time_s: "):
        load_document(path)


@pytest.mark.parametrize(("content", "message"), [
    (b"[1, 2]", "holds a JSON list, not an object"),
    (b"{\"a\": ", "is not JSON: Expecting value at line 1"),
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
])
def test_bad_files_are_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=message):
        load_document(path)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist or is not a file"):
        load_document(tmp_path / "nope.json")
    with pytest.raises(ReportError, match="does not exist or is not a file"):
        load_document(tmp_path)


def test_detect_kind_needs_all_keys() -> None:
    with pytest.raises(ReportError):
        detect_kind({"ops": [], "by_kind": []}, Path("x.json"))  # estimate without totals and memory_bytes
    assert detect_kind({"ops": [], "by_kind": [], "totals": {}, "memory_bytes": {}}, Path("x")).name == "estimate"

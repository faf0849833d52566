"""RecordSet: deduplication, call counts, JSON/JSONL round trip, byte-deterministic output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerscope.errors import OutputError, RecordsError
from layerscope.model.spec import ModelSpec
from layerscope.records import OpCall, RecordSet, records_from_spec
from layerscope.records.schema import digest

BF16 = {"act": "bfloat16", "weight": "bfloat16"}


def _norm(rows: int) -> OpCall:
    return OpCall("rmsnorm", "norm", {"hidden_size": 64}, {"batch_size": rows}, BF16)


def test_workloads_are_deduplicated_and_calls_counted() -> None:
    rs = RecordSet()
    for layer in (0, 0, 1):
        rs.add(_norm(8), layer, "prefill")
    rs.add(_norm(1), 0, "decode")
    assert list(rs.definitions) == ["rmsnorm_h64"]
    assert rs.workload_count() == 2
    assert rs.calls[("rmsnorm_h64", 0, "prefill")].calls == 2
    assert rs.calls[("rmsnorm_h64", 1, "prefill")].calls == 1
    entry = next(iter(rs.workloads["rmsnorm_h64"].values()))
    assert entry.workload.inputs["hidden_states"].shape == [8, 64]
    assert entry.workload.inputs["weight"].shape == [64]


def test_round_trip_and_flashinfer_layout(tmp_path: Path, llama70b: ModelSpec) -> None:
    rs = records_from_spec(llama70b, prompt_len=16, decode_steps=1, layers=range(2))
    rs.write(tmp_path / "r")
    d = json.loads((tmp_path / "r/definitions/rmsnorm/rmsnorm_h8192.json").read_text())
    assert d["axes"]["hidden_size"] == {"type": "const", "value": 8192, "description": "normalized width"}
    assert d["axes"]["batch_size"]["type"] == "var" and "def run(" in d["reference"]
    lines = (tmp_path / "r/workloads/gemm/gemm_n8192_k8192.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert {r["workload"]["axes"]["M"] for r in rows} == {1, 16}
    assert all(r["solution"] is None and r["evaluation"] is None for r in rows)
    assert rows[0]["workload"]["inputs"]["A"] == {"type": "random", "shape": [1, 8192], "dtype": "bfloat16"}
    back = RecordSet.read(tmp_path / "r")
    assert back.definitions == rs.definitions and back.calls == rs.calls and back.passes == rs.passes
    assert back.workloads == rs.workloads and back.meta == rs.meta


def test_output_is_byte_deterministic(tmp_path: Path, llama70b: ModelSpec) -> None:
    for name in ("a", "b"):
        records_from_spec(llama70b, prompt_len=8, decode_steps=1, layers=range(1)).write(tmp_path / name)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")


def test_read_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(RecordsError, match="does not exist"):
        RecordSet.read(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordsError, match=r"no calls\.json"):
        RecordSet.read(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "calls.json").write_text("{not json")
    with pytest.raises(RecordsError, match="cannot read"):
        RecordSet.read(bad)


def test_never_writes_over_an_input(tmp_path: Path) -> None:
    rs = RecordSet()
    rs.add(_norm(8), 0, "prefill")
    out = tmp_path / "r"
    rs.write(out)
    calls = out / "calls.json"
    with pytest.raises(OutputError, match="refusing to overwrite"):
        rs.write(out, inputs=(calls,))

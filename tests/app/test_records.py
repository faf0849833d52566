"""``app.records``: workloads and verify, one request in, one result model out; ``--json`` is its dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerscope.app.records import (
    VerifyRequest,
    VerifyResult,
    WorkloadsRequest,
    WorkloadsResult,
    result_of,
    run_workloads,
    verify,
    workloads,
)
from layerscope.app.requests import ParallelPlan, build_request
from layerscope.cli.app import app
from layerscope.errors import RecordsError


def _graph(out: Path, model: str = "llama-3.2-1b", **fields: object) -> WorkloadsRequest:
    return WorkloadsRequest(model=model, out=out, from_graph=True, layers=2, prompt_len=16, decode_steps=1,
                            **fields)  # type: ignore[arg-type]


def test_workloads_from_graph_writes_and_summarizes(tmp_path: Path):
    result = workloads(_graph(tmp_path / "r"))
    assert result.out == str(tmp_path / "r") and (tmp_path / "r" / "calls.json").is_file()
    assert result.meta["source"] == "graph" and result.passes == {"prefill": 1, "decode": 1}
    rows = {r.definition: r for r in result.records}
    assert rows["rmsnorm_h2048"].layers == 2 and rows["rmsnorm_h2048"].calls == 2 * (2 * 2 + 1)
    assert result.definitions == len(rows) and result.workloads >= result.definitions
    assert WorkloadsResult.model_validate_json(result.model_dump_json()) == result


def test_parallel_plan_splits_the_records(tmp_path: Path):
    one = workloads(_graph(tmp_path / "one"))
    two = workloads(_graph(tmp_path / "two", parallel=ParallelPlan(tensor_parallel=2)))
    assert one.meta["tp"] == 1 and two.meta["tp"] == 2
    assert {r.definition for r in one.records} != {r.definition for r in two.records}


def test_verify_against_the_spec_and_other_records(tmp_path: Path):
    workloads(_graph(tmp_path / "dense"))
    ok = verify(VerifyRequest(traces=tmp_path / "dense", model="llama-3.2-1b"))
    assert ok.ok and ok.against == "spec" and not ok.gaps and {c.category for c in ok.categories} >= {"attention"}
    workloads(_graph(tmp_path / "moe", model="qwen3-30b-a3b"))
    gaps = verify(VerifyRequest(traces=tmp_path / "moe", against=tmp_path / "dense"))
    assert not gaps.ok and gaps.gaps
    moe = {c.category: c for c in gaps.categories}["moe_experts"]
    assert moe.status == "unexpected" and moe.expected_calls_per_pass == 0
    # nothing expected: the whole 0 the records layer sums, kept as the JSON has always printed it
    assert '"expected_calls_per_pass":0,' in gaps.model_dump_json()
    assert VerifyResult.model_validate_json(gaps.model_dump_json()) == gaps


def test_cli_json_is_the_result_dump(tmp_path: Path):
    out = tmp_path / "r"
    cli = CliRunner().invoke(app, ["workloads", "--model", "llama-3.2-1b", "--from-graph", "--layers", "2",
                                   "--prompt-len", "16", "--decode-steps", "1", "--tp", "2", "--out", str(out),
                                   "--json"])
    assert cli.exit_code == 0, cli.output
    request = _graph(out, parallel=ParallelPlan(tensor_parallel=2))
    assert json.loads(cli.stdout) == json.loads(result_of(run_workloads(request)).model_dump_json())
    checked = CliRunner().invoke(app, ["verify", "--traces", str(out), "--model", "llama-3.2-1b", "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout) == json.loads(
        verify(VerifyRequest(traces=out, model="llama-3.2-1b")).model_dump_json())


def test_bad_request_fields_are_named(tmp_path: Path):
    with pytest.raises(RecordsError, match="tensor_parallel"):
        build_request(WorkloadsRequest, RecordsError, model="llama-3.2-1b", out=tmp_path,
                      parallel=build_request(ParallelPlan, RecordsError, tensor_parallel=0))
    with pytest.raises(RecordsError, match="batch"):
        build_request(WorkloadsRequest, RecordsError, model="llama-3.2-1b", out=tmp_path, batch="many")
    with pytest.raises(RecordsError, match="unknown form 'weird'"):
        workloads(_graph(tmp_path / "x", mla_form="weird"))
    with pytest.raises(RecordsError, match="--prompt-len: 0"):
        workloads(WorkloadsRequest(model="llama-3.2-1b", out=tmp_path / "x", from_graph=True, prompt_len=0))
    with pytest.raises(RecordsError, match="--from-graph only"):
        workloads(WorkloadsRequest(model="llama-3.2-1b", out=tmp_path / "x", parallel=ParallelPlan(tensor_parallel=2)))
    with pytest.raises(RecordsError, match="exactly one of --model"):
        verify(VerifyRequest(traces=tmp_path))
    with pytest.raises(RecordsError, match="traces"):
        build_request(VerifyRequest, RecordsError, model="llama-3.2-1b")

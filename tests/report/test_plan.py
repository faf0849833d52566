"""The plan ranking's charts (``report/plan.py``) on a real ``plan --json`` of Llama-3.1-70B on two DGX H100."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerscope.report import load_document
from layerscope.report.plan import MAX_RANKED, charts, plan_label

pytest.importorskip("plotly", reason="the report's charts need plotly: pip install 'layerscope[report]'")


def test_ranking_is_the_plans_order(plan_json: Path) -> None:
    doc = load_document(plan_json)
    section = charts(doc)
    assert [c.id for c in section.charts] == ["plan-ranking", "plan-tradeoff", "plan-failures"]
    latency, throughput = section.charts[0].figure.data
    plans = doc.data["plans"]
    shown = min(len(plans), MAX_RANKED)
    assert list(latency.y) == [f"#{i + 1} {plan_label(p)}" for i, p in enumerate(plans[:shown])]
    assert list(latency.x) == pytest.approx([p["latency_s"] * 1e3 for p in plans[:shown]])
    assert list(throughput.x) == pytest.approx([p["output_tokens_per_s_per_gpu"] for p in plans[:shown]])
    assert list(latency.x) == sorted(latency.x)  # ranked by latency: best first
    if len(plans) > MAX_RANKED:
        assert f"the best {MAX_RANKED} of {len(plans)} valid plans drawn" in section.notes[0]


def test_tradeoff_has_every_plan_and_failures_every_reason(plan_json: Path) -> None:
    doc = load_document(plan_json)
    section = charts(doc)
    assert sum(len(trace.x) for trace in section.charts[1].figure.data) == len(doc.data["plans"])
    failures = section.charts[2].figure.data[0]
    assert sum(failures.x) == len(doc.data["failures"]) > 0
    # 70B in bf16 is 141 GB of weights: on few GPUs the plans run out of memory, numbers folded into one reason.
    assert "needs N GB per GPU (weights N, KV N); a GPU has N GB" in failures.y


def test_plan_label() -> None:
    row = {"gpus": 8, "tensor_parallel": 4, "pipeline_parallel": 2, "expert_parallel": 1, "data_parallel": 1,
           "micro_batches": 2}
    assert plan_label(row) == "8 GPUs: tp4 pp2 ep1 dp1 ×2"

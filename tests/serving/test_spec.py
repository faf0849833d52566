"""SLO parsing and the request models' checks."""

from __future__ import annotations

import pytest

from layerscope.errors import LayerscopeError
from layerscope.serving import SLO, LengthSpec, SchedulerSpec, ServingError, ServingPlan, TrafficSpec, parse_slo


def test_parse_slo_units():
    assert parse_slo("ttft=200ms,tpot=50ms") == SLO(ttft_ms=200, tpot_ms=50)
    assert parse_slo("ttft=0.5s, e2el=2000") == SLO(ttft_ms=500, e2el_ms=2000)


@pytest.mark.parametrize(("text", "named"), [("ttft=200ms,tpt=5ms", "tpt=5ms"), ("ttft=fast", "ttft=fast"),
                                             ("ttft=1ms,ttft=2ms", "given twice"), ("", "no limits")])
def test_parse_slo_names_the_bad_part(text, named):
    with pytest.raises(ServingError, match=named):
        parse_slo(text)


def test_serving_error_is_a_layerscope_error():
    assert issubclass(ServingError, LayerscopeError)


def test_traffic_checks():
    with pytest.raises(ValueError, match="rate_per_s"):
        TrafficSpec(arrival="poisson")
    with pytest.raises(ValueError, match="users"):
        TrafficSpec(arrival="closed-loop")
    with pytest.raises(ValueError, match="high"):
        LengthSpec(dist="uniform", low=4)


def test_plan_accepts_the_apps_parallel_plan():
    from layerscope.app.requests import ParallelPlan

    plan = ServingPlan.model_validate(ParallelPlan(tensor_parallel=2, data_parallel=3))
    assert (plan.tensor_parallel, plan.data_parallel) == (2, 3)
    with pytest.raises(ValueError, match="two_batch_overlap"):
        ServingPlan(two_batch_overlap=True)


def test_scheduler_defaults_are_vllms():
    spec = SchedulerSpec()
    assert (spec.max_num_seqs, spec.max_num_batched_tokens, spec.block_tokens) == (256, 8192, 16)

"""Progress inside one chunk: reported per configuration, summing exactly to the case count."""

from __future__ import annotations

from service import examples
from service.engine.chunk import block_cases
from service.engine.records import load_records
from service.engine.replay import plan_replay, run_chunk, total_cases
from service.engine.spec import make_spec


def test_one_block_chunk_reports_progress_per_configuration_and_sums_to_the_cases():
    records = load_records(str(examples.path()))
    spec = make_spec(
        policies=["coverage_bootstrap", "serfling_coverage", "neyman_coverage_bootstrap", "cost_forced"],
        deltas=[0, 5],
        orders=30,
        seeds=2,
    )
    plan = plan_replay(records, spec)
    assert plan.n_pairs * spec.orders * len(spec.budgets) < block_cases(plan)  # all pairs are one block
    calls: list[int] = []
    run_chunk(plan, 0, plan.n_pairs, progress=calls.append)
    assert sum(calls) == total_cases(plan)
    per_seed_uniform_configs = 2 * 2  # coverage_bootstrap and serfling at two thresholds share one order
    assert len(calls) >= spec.seeds * per_seed_uniform_configs  # not one call at the end
    assert max(calls) < total_cases(plan) / 4

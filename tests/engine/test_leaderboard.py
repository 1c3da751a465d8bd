"""Leaderboards (SPEC §8, §8.1): rankings, corrected pairwise tests, tie groups, real data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from service.engine import leaderboard as L
from service.engine.evalstats import StatsInputError
from service.engine.records import from_rows, load_records
from tests.conftest import shared_dataset

# --------------------------------------------------------------------------- leaderboard


def test_adjust_pvalues_holm_and_bh():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.005])
    holm = L.adjust_pvalues(p, "holm")
    bh = L.adjust_pvalues(p, "bh")
    # by hand: sorted 0.005, 0.01, 0.03, 0.04 with m = 4
    np.testing.assert_allclose(holm[[4, 0, 2, 1]], [0.02, 0.03, 0.06, 0.06])
    np.testing.assert_allclose(bh[[4, 0, 2, 1]], [0.02, 0.02, 0.04, 0.04])
    assert np.isnan(holm[3]) and np.isnan(bh[3])
    np.testing.assert_array_equal(L.adjust_pvalues(p, "none"), p)
    with pytest.raises(StatsInputError) as exc:
        L.adjust_pvalues([0.1], "bonferroni")
    assert exc.value.field == "correction"


def test_leaderboard_separates_far_systems_and_ties_equal_ones():
    rng = np.random.default_rng(12)
    n = 400
    base = rng.random(n)
    skill = {"S1": 0.6, "S2": 0.0, "S3": 0.0, "S4": -0.6}
    rows = []
    for s, shift in skill.items():
        outs = (rng.random(n) < np.clip(base + shift, 0, 1)).astype(int)
        rows += [
            {"system": s, "task_id": f"t{t}", "outcome": int(o), "group": f"g{t % 20}"} for t, o in enumerate(outs)
        ]
    rec = from_rows(rows)
    lb = L.leaderboard(rec, correction="holm", matrix=True)
    assert [r.stats.system for r in lb.rows][0] == "S1" and lb.rows[-1].stats.system == "S4"
    assert [(g.first_rank, g.last_rank) for g in lb.tie_groups] == [(1, 1), (2, 3), (4, 4)]
    assert lb.tie_groups[1].description == "ranks 2–3 are statistically tied"
    assert len(lb.matrix) == 6 and all(c.test == "mcnemar_exact" for c in lb.adjacent)
    clustered = L.leaderboard(rec, cluster="group")
    assert clustered.n_clusters == 20 and all(c.test == "paired_t_clustered" for c in clustered.adjacent)
    assert clustered.rows[0].stats.interval.method == "cluster_t"
    with pytest.raises(StatsInputError) as exc:
        L.leaderboard(rec, cluster="nope")
    assert exc.value.field == "cluster"
    with pytest.raises(StatsInputError) as exc:
        L.leaderboard(rec, ties="transitive")
    assert exc.value.field == "ties"
    leader = L.leaderboard(rec, ties="leader")
    _check_leader_groups(leader)
    assert [(g.first_rank, g.last_rank) for g in leader.tie_groups] == [(1, 1), (2, 3), (4, 4)]
    assert leader.tie_groups[0].description == "rank 1 forms a group of its own"


def _check_partition(lb):
    names = [r.stats.system for r in lb.rows]
    assert [s for g in lb.tie_groups for s in g.systems] == names
    for c in lb.adjacent:  # a group boundary exactly where an adjacent lead is distinguishable
        same = any(c.higher in g.systems and c.lower in g.systems for g in lb.tie_groups)
        assert same != c.distinguishable


def _check_leader_groups(lb):
    distinct = {(c.rank_higher, c.rank_lower): c.distinguishable for c in lb.matrix}
    names = [r.stats.system for r in lb.rows]
    assert [s for g in lb.tie_groups for s in g.systems] == names
    for g in lb.tie_groups:
        assert all(not distinct[(g.first_rank, r)] for r in range(g.first_rank + 1, g.last_rank + 1))
        if g.last_rank < len(names):  # the run stops at the first rank distinguishable from the leader
            assert distinct[(g.first_rank, g.last_rank + 1)]


def _boundaries(lb):
    return {c.rank_higher for c in lb.adjacent if c.distinguishable}


def test_swebench_lite_tie_groups():
    rec = load_records(str(shared_dataset("swebench_lite")))
    lbs = {corr: L.leaderboard(rec, correction=corr, ties="adjacent") for corr in L.CORRECTIONS}
    for lb in lbs.values():
        _check_partition(lb)
    # holm controls the family-wise error, so its boundaries are a subset of BH's, and BH's of none's
    assert _boundaries(lbs["holm"]) <= _boundaries(lbs["bh"]) <= _boundaries(lbs["none"])
    # adjacent p-values are exact McNemar tests: check one against scipy
    c = lbs["none"].adjacent[0]
    ia, ib = rec.systems.index(c.higher), rec.systems.index(c.lower)
    d = rec.y[ia] - rec.y[ib]
    a, b = int((d == 1).sum()), int((d == -1).sum())
    assert c.p_value == pytest.approx(stats.binomtest(a, a + b, 0.5).pvalue, rel=1e-12)
    clustered = L.leaderboard(rec, cluster="group", matrix=True, ties="adjacent")
    _check_partition(clustered)
    leader = L.leaderboard(rec, cluster="group", ties="leader")
    _check_leader_groups(leader)
    assert leader.matrix is not None and leader.definition == L.TIE_DEFINITIONS["leader"]
    assert clustered.n_clusters == 12 and len(clustered.matrix) == 42 * 41 // 2
    top = clustered.rows[0].stats
    assert top.clustered.design_effect > 1  # tasks of one repository resemble each other


def test_terminal_bench_leaderboard_with_repeated_trials():
    rec = load_records(str(shared_dataset("terminal_bench_core_0.1.1")))
    lb = L.leaderboard(rec, cluster="group", ties="adjacent")
    _check_partition(lb)
    _check_leader_groups(L.leaderboard(rec, cluster="group", ties="leader"))
    assert all(c.test == "paired_t_clustered" for c in lb.adjacent)
    assert all(r.stats.clopper_pearson is None for r in lb.rows)  # repeated trials

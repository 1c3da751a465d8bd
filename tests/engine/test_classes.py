"""Pair selections, gap classes, operating characteristic and diagnostics (SPEC §5.1, §6).

Every class number is checked against an independent recomputation from the report's own
per-pair rows (which the engine's pooled rates are tested against elsewhere)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from service.cli import main
from service.engine import classes, diagnostics
from service.engine.coverage import required
from service.engine.records import from_rows, load_records
from service.engine.replay import run_replay
from service.engine.report import report_json
from service.engine.spec import SpecError, make_spec
from tests.conftest import shared_dataset

EDGES = (0.0, 1.0, 2.0, 5.0, 10.0, 100.0)


@pytest.fixture(scope="module")
def lite():
    return load_records(str(shared_dataset("swebench_lite")))


@pytest.fixture(scope="module")
def lite_report(lite):
    spec = make_spec(orders=40, groups=["group"], budgets=[0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 0.95])
    return run_replay(lite, spec)


def _class_of(gap_pp: float, edges=EDGES) -> int | None:
    """Class by the SPEC's [lo, hi) rule, the last class closed; gaps rounded to 1e-7 pp so
    that 0.02 (2 pp) is on its edge."""
    g = round(gap_pp, 7)
    for i, (lo, hi) in enumerate(itertools.pairwise(edges)):
        if lo <= g < hi or (i == len(edges) - 2 and g == hi):
            return i
    return None


def _misses(far, frr, cov, dfr, alpha=0.05, gamma=0.05, eta=0.25):
    out = []
    for name, v, t in (
        ("false_accept_rate", far, alpha),
        ("false_reject_rate", frr, alpha),
        ("coverage_failure", cov, gamma),
        ("defer_rate", dfr, eta),
    ):
        if v is not None and v > t + 1e-12:
            out.append(name)
    return out


def test_lite_gap_classes_add_up_and_match_the_per_pair_rows(lite_report):
    rep = lite_report
    conf = rep["configurations"][0]
    cls = conf["gap_classes"]
    assert [(c["low"], c["high"]) for c in cls] == list(itertools.pairwise(EDGES))
    assert sum(c["pairs"] for c in cls) == conf["n_pairs"] == rep["pairs"]["ordered"] == 42 * 41
    assert conf["pairs_outside_gap_classes"] == 0
    reps = rep["spec"]["orders"]
    rows = conf["per_pair"]
    for i, c in enumerate(cls):
        mine = [p for p in rows if _class_of(abs(p["delta_full"]) * 100) == i]
        assert c["pairs"] == len(mine)
        neg = [p for p in mine if p["full_decision"] == "negative"]
        pos = [p for p in mine if p["full_decision"] == "positive"]
        assert (c["negative_pairs"], c["positive_pairs"]) == (len(neg), len(pos))
        first_ok = None
        for j, b in enumerate(c["budgets"]):
            assert b["cases"] == len(mine) * reps and b["n_negative"] == len(neg) * reps
            defer = sum(p["defer"][j] for p in mine) / len(mine)
            far = sum(p["accept"][j] for p in neg) / len(neg) if neg else None
            frr = sum(p["reject"][j] for p in pos) / len(pos) if pos else None
            assert math.isclose(b["defer_rate"], defer, abs_tol=1e-9)
            assert (far is None) == (b["false_accept_rate"] is None)
            if far is not None:
                assert math.isclose(b["false_accept_rate"], far, abs_tol=1e-9)
            if frr is not None:
                assert math.isclose(b["false_reject_rate"], frr, abs_tol=1e-9)
            # the class's own sufficiency, from the recomputed rates (coverage failure is 0 for a
            # coverage-aware policy: it defers when coverage is unmet)
            assert b["coverage_failure"] == 0.0
            ok = not _misses(far, frr, 0.0, defer)
            assert b["sufficient"] == ok
            if ok and first_ok is None:
                first_ok = b["budget"]
        assert c["minimum_sufficient_budget"] == first_ok
    # near-ties need more tasks than wide gaps: the widest class is sufficient, the closest is not
    assert cls[-1]["minimum_sufficient_budget"] is not None
    assert cls[0]["minimum_sufficient_budget"] is None


def test_lite_operating_characteristic_matches_the_per_pair_rows(lite_report):
    conf = lite_report["configurations"][0]
    oc = conf["operating_characteristic"]
    assert oc["budgets"] == lite_report["spec"]["budgets"]
    rows = conf["per_pair"]
    assert sum(c["pairs"] for c in oc["classes"]) == len(rows)
    for c in oc["classes"]:
        lo = -math.inf if c["low"] is None else c["low"]
        hi = math.inf if c["high"] is None else c["high"]
        sign = c["full_decision"]

        def inside(p, lo=lo, hi=hi, sign=sign):
            x = round(p["delta_full"] * 100 - conf["delta"], 7)
            if p["full_decision"] != sign:
                return False
            return lo < x <= hi if sign == "negative" else lo <= x < hi

        mine = [p for p in rows if inside(p)]
        assert c["pairs"] == len(mine), (c["low"], c["high"], sign)
        for j in range(len(oc["budgets"])):
            for key in ("accept", "reject", "defer"):
                if not mine:
                    assert c[key][j] is None
                else:
                    assert math.isclose(c[key][j], sum(p[key][j] for p in mine) / len(mine), abs_tol=1e-9)
        assert "mean_tasks_used" not in c  # bootstrap at fixed budgets is not sequential
    neg = [c for c in oc["classes"] if c["full_decision"] == "negative"]
    assert [c["high"] for c in neg][-1] == 0.0 and neg[0]["low"] is None  # ordered from -inf up to 0


def test_anytime_operating_characteristic_gives_mean_tasks_used(lite):
    spec = make_spec(policies=["anytime_coverage"], orders=6, groups=["group"], budgets=[0.3, 0.9], pairs="top:6")
    conf = run_replay(lite, spec)["configurations"][0]
    for c in conf["operating_characteristic"]["classes"]:
        if c["pairs"]:
            k = [b["k_mean"] for b in conf["budgets"]]
            assert all(0 < u <= kk + 1e-9 for u, kk in zip(c["mean_tasks_used"], k, strict=True))
    total = sum(
        c["pairs"] * np.array(c["mean_tasks_used"]) for c in conf["operating_characteristic"]["classes"] if c["pairs"]
    )
    assert np.allclose(total / conf["n_pairs"], [b["mean_tasks_used"] for b in conf["budgets"]])


# --------------------------------------------------------------------------- pair selections


def test_cli_pairs_involving_keeps_only_pairs_with_that_system(lite, tmp_path, capsys):
    path = str(shared_dataset("swebench_lite"))
    system = lite.systems[7]
    out = tmp_path / "r.json"
    code = main(
        [
            "replay",
            path,
            "--orders",
            "8",
            "--budgets",
            "0.2,0.6",
            "--pairs",
            f"involving:{system}",
            "--format",
            "json",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rep = json.loads(out.read_bytes())
    rows = rep["configurations"][0]["per_pair"]
    assert len(rows) == 2 * 41 and all(system in (p["a"], p["b"]) for p in rows)
    assert rep["pairs"]["selection"] == f"involving:{system}"
    assert rep["pairs"]["not_selected"] == 42 * 41 - 82
    # a pair's result does not depend on which other pairs are replayed
    full = run_replay(lite, make_spec(orders=8, budgets=[0.2, 0.6]))["configurations"][0]["per_pair"]
    by_pair = {(p["a"], p["b"]): p for p in full}
    assert all(by_pair[(p["a"], p["b"])] == p for p in rows)


def _synthetic(n_systems=6, n_tasks=24, groups=None, drop=()):
    """System i passes task t when (t * (i + 3)) % 7 < i + 1: distinct, known means."""
    rows = []
    for i in range(n_systems):
        for t in range(n_tasks):
            if (i, t) in drop:
                continue
            row = {"system": f"s{i}", "task_id": f"t{t:02d}", "outcome": int((t * (i + 3)) % 7 < i + 1)}
            if groups is not None:
                row["group"] = groups(t)
            rows.append(row)
    return from_rows(rows)


def test_selections_against_an_independent_computation():
    rec = _synthetic()
    y = rec.y
    means = y.mean(axis=1)
    names = rec.systems
    rank = sorted(range(len(names)), key=lambda s: (-means[s], names[s]))
    spec_all = make_spec(orders=4, budgets=[0.5], policies=["uniform_forced"])
    full = {(p["a"], p["b"]): p for p in run_replay(rec, spec_all)["configurations"][0]["per_pair"]}

    def kept(sel):
        rep = run_replay(rec, make_spec(orders=4, budgets=[0.5], policies=["uniform_forced"], pairs=sel))
        rows = rep["configurations"][0]["per_pair"]
        assert all(full[(p["a"], p["b"])] == p for p in rows)
        return {(p["a"], p["b"]) for p in rows}

    def expect(pred):
        return {(names[a], names[b]) for a in range(len(names)) for b in range(len(names)) if a != b and pred(a, b)}

    pos = {s: i for i, s in enumerate(rank)}
    gap = lambda a, b: abs(means[a] - means[b]) * 100  # noqa: E731  one task set: Δ_full is the mean gap
    assert kept("adjacent") == expect(lambda a, b: abs(pos[a] - pos[b]) == 1)
    assert kept("top:3") == expect(lambda a, b: pos[a] < 3 and pos[b] < 3)
    x = sorted({round(gap(a, b), 6) for a in range(6) for b in range(a)})[3]  # a gap that exists exactly
    assert kept(f"min_gap:{x}") == expect(lambda a, b: gap(a, b) >= x - 1e-7)
    assert kept("top:4+adjacent") == expect(lambda a, b: pos[a] < 4 and pos[b] < 4 and abs(pos[a] - pos[b]) == 1)
    assert kept("involving:s1,s4") == expect(lambda a, b: {a, b} & {1, 4})
    assert kept(" all + involving:s2 ") == expect(lambda a, b: 2 in (a, b))


def test_selection_names_with_plus_and_comma():
    rows = [
        {"system": s, "task_id": f"t{t}", "outcome": int((t + i) % 3 == 0)}
        for i, s in enumerate(["gpt+tools", "a,b", "plain"])
        for t in range(9)
    ]
    rec = from_rows(rows)
    for sel, who in (
        ("involving:gpt+tools", "gpt+tools"),
        ("involving:a,b", "a,b"),
        ("involving:gpt+tools+top:3", "gpt+tools"),
    ):
        rep = run_replay(rec, make_spec(orders=2, budgets=[0.5], policies=["uniform_forced"], pairs=sel))
        assert all(who in (p["a"], p["b"]) for p in rep["configurations"][0]["per_pair"]), sel
        assert rep["pairs"]["ordered"] == 4


@pytest.mark.parametrize(
    "sel",
    ["", "nonsense", "top:0", "top:x", "top:" + "9" * 5000, "min_gap:-1", "min_gap:abc", "involving:",
     "+".join(["adjacent"] * 17)],  # 5,000 digits: int() raised past 4,300 (a 500)
)
def test_bad_selections_name_the_pairs_field(sel):
    with pytest.raises(SpecError) as exc:
        make_spec(pairs=sel)
    assert exc.value.field == "pairs"


def test_selections_that_keep_nothing_or_name_unknown_systems_are_spec_errors():
    from service.engine.replay import plan_replay

    rec = _synthetic()
    for sel, words in (
        ("involving:nobody", "no system named 'nobody'"),
        ("top:1", "keeps none"),
        ("min_gap:100", "keeps none"),
    ):
        with pytest.raises(SpecError) as exc:
            plan_replay(rec, make_spec(pairs=sel))
        assert exc.value.field == "pairs" and words in exc.value.message


@pytest.mark.parametrize("edges", [[0], [0, 0], [2, 1], [0, float("nan")], [-1, 5], [0, 300], list(range(50))])
def test_bad_gap_class_edges(edges):
    with pytest.raises(SpecError) as exc:
        make_spec(gap_classes=edges)
    assert exc.value.field == "gap_classes"


def test_custom_edges_and_pairs_outside_them():
    rec = _synthetic()
    rep = run_replay(rec, make_spec(orders=3, budgets=[0.5], policies=["uniform_forced"], gap_classes=[0, 5, 20]))
    conf = rep["configurations"][0]
    gaps = [abs(p["delta_full"]) * 100 for p in conf["per_pair"]]
    inside = [_class_of(g, (0, 5, 20)) for g in gaps]
    assert [c["pairs"] for c in conf["gap_classes"]] == [inside.count(0), inside.count(1)]
    assert conf["pairs_outside_gap_classes"] == inside.count(None) > 0
    assert rep["spec"]["gap_classes"] == [0.0, 5.0, 20.0]


def test_class_index_edges_are_exact():
    g = np.array([0.0, 0.999999999999, 1.0, 1.9999999999, 2.0, 99.9, 100.0, 100.5])
    assert classes.class_index(g, EDGES).tolist() == [0, 1, 1, 2, 2, 4, 4, -1]
    assert classes.class_index(g, EDGES, open_last=True).tolist()[-1] == 4


# --------------------------------------------------------------------------- diagnostics


def _codes(items):
    return [d["code"] for d in items]


def test_terminal_bench_by_task_family_carries_coverage_infeasible_below():
    rec = load_records(str(shared_dataset("terminal_bench_core_0.1.1")))
    rep = run_replay(rec, make_spec(orders=4, groups=["group"], budgets=[0.1, 0.5, 0.95]))
    conf = rep["configurations"][0]
    diag = {d["code"]: d["message"] for d in conf["diagnostics"]}
    assert "coverage_infeasible_below" in diag
    assert "70 groups for 80 tasks" in diag["coverage_infeasible_below"]
    assert "k = 73" in diag["coverage_infeasible_below"]
    # the error-and-coverage budget is 10 %, where every case deferred
    assert conf["error_coverage_budget"] == 0.1 and "error_budget_vacuous" in diag
    assert all(b["defer_rate"] == 1.0 for b in conf["budgets"][:2])


def test_synthetic_diagnostics():
    # 20 tasks in 16 groups: floors need >= 16 tasks; a system missing two tasks; few orders
    rec = _synthetic(n_systems=4, n_tasks=20, groups=lambda t: f"g{min(t, 15)}", drop={(3, 0), (3, 1)})
    rep = run_replay(
        rec,
        make_spec(
            orders=4,
            groups=["group", None],
            min_task_coverage=0.9,
            budgets=[0.25, 0.5, 0.9],
            policies=["coverage_bootstrap", "uniform_forced"],
        ),
    )
    assert _codes(rep["diagnostics"]) == ["unequal_task_sets"]
    assert "from 18 to 20 common tasks" in rep["diagnostics"][0]["message"]
    by = {(c["policy"]["name"], c["group"]): c for c in rep["configurations"]}
    cov = by[("coverage_bootstrap", "group")]
    assert "coverage_infeasible_below" in _codes(cov["diagnostics"])
    message = next(d["message"] for d in cov["diagnostics"] if d["code"] == "coverage_infeasible_below")
    n = 18 if "for 18 tasks" in message else 20  # pairs with s3 have 18 tasks, the others 20
    n_g = np.bincount([min(t, 15) for t in range(2 if n == 18 else 0, 20)])
    k_fit = next(k for k in range(1, n + 1) if required("proportional", k, n_g).sum() <= k)
    assert f"k = {k_fit} of {n}" in message and "infeasible at every tested budget" in message
    assert _codes(by[("coverage_bootstrap", None)]["diagnostics"]).count("single_group") == 1
    assert "single_group" not in _codes(by[("uniform_forced", None)]["diagnostics"])
    # a forced rule ignores coverage: infeasible floors show up as coverage failure instead
    forced = by[("uniform_forced", "group")]
    assert "coverage failure" in next(
        d["message"] for d in forced["diagnostics"] if d["code"] == "coverage_infeasible_below"
    )
    assert forced["budgets"][0]["coverage_failure"] == 1.0
    # 6 negative pairs x 4 orders = 24 cases under the false accept rate: few cases
    for c in rep["configurations"]:
        few = next(d["message"] for d in c["diagnostics"] if d["code"] == "few_cases")
        assert "false accept rate (24 cases)" in few and "false reject rate (24 cases)" in few
        assert "defer rate" not in few  # 48 cases


def test_no_diagnostics_when_nothing_misleads(lite):
    rep = run_replay(lite, make_spec(orders=30, groups=["group"], budgets=[0.3, 0.6], pairs="top:8"))
    assert rep["diagnostics"] == [] and rep["configurations"][0]["diagnostics"] == []


def test_first_feasible_k_against_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n_g = rng.integers(1, 12, size=rng.integers(1, 25))
        for floor in ("proportional", "slack", "one_per_group", "none"):
            big_n = int(n_g.sum())
            brute = next((k for k in range(1, big_n + 1) if required(floor, k, n_g).sum() <= k), None)
            assert diagnostics.first_feasible_k(floor, n_g) == brute


def test_same_spec_and_seed_same_bytes(lite):
    spec = make_spec(
        orders=6,
        groups=["group"],
        budgets=[0.2, 0.8],
        pairs="top:12+min_gap:1",
        seeds=2,
        policies=["coverage_bootstrap", "anytime_coverage"],
    )
    assert report_json(run_replay(lite, spec)) == report_json(run_replay(lite, spec, jobs=2, chunks=5))

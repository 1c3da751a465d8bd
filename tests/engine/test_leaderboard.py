"""Leaderboards (SPEC §8, §8.1): rankings, corrected pairwise tests, tie groups, real data."""

from __future__ import annotations

import csv
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from service.engine import evalstats as E
from service.engine import leaderboard as L
from service.engine import letters
from service.engine.letters import compact_letters, letter_name
from service.engine.records import from_rows, group_labels, load_records
from service.engine.statbase import StatsInputError
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


# --------------------------------------------------------------------------- rank intervals, letters, tie groups (§8.1)


def _read_binary_board(path):
    """System -> {task: outcome} straight from the CSV (single-trial 0/1 records)."""
    board: dict[str, dict[str, int]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            board.setdefault(row["system"], {})[row["task_id"]] = int(float(row["outcome"]))
    return board


def _holm_rejections(pvalues: dict, alpha: float) -> set:
    """Holm's step-down procedure written out: reject in ascending order while p <= alpha/(m - k)."""
    ordered = sorted(pvalues.items(), key=lambda kv: kv[1])
    m = len(ordered)
    rejected = set()
    for k, (pair, p) in enumerate(ordered):
        if p > alpha / (m - k):
            break
        rejected.add(pair)
    return rejected


@pytest.mark.parametrize("level", [0.95, 0.9])
def test_swebench_lite_rank_intervals_against_holm_corrected_exact_mcnemar(level):
    path = shared_dataset("swebench_lite")
    board = _read_binary_board(path)
    names = sorted(board)
    means = {s: sum(board[s].values()) / len(board[s]) for s in names}
    pvalues, sign = {}, {}
    for a, b in itertools.combinations(names, 2):
        common = board[a].keys() & board[b].keys()
        n_plus = sum(board[a][t] > board[b][t] for t in common)
        n_minus = sum(board[a][t] < board[b][t] for t in common)
        n = n_plus + n_minus
        pvalues[(a, b)] = stats.binomtest(n_plus, n, 0.5).pvalue if n else 1.0
        sign[(a, b)] = n_plus - n_minus
    rejected = _holm_rejections(pvalues, 1 - level)
    better = {s: 0 for s in names}  # systems significantly better than s
    worse = {s: 0 for s in names}  # systems significantly worse than s
    for a, b in rejected:
        hi, lo = (a, b) if sign[(a, b)] > 0 else (b, a)
        better[lo] += 1
        worse[hi] += 1
    lb = L.leaderboard(load_records(str(path)), level=level, matrix=True)
    assert len(rejected) == sum(c.distinguishable for c in lb.matrix) > 0
    S = len(names)
    for row in lb.rows:
        s = row.stats.system
        assert (row.rank_low, row.rank_high) == (1 + better[s], S - worse[s]), s
        assert row.rank_low <= row.rank <= row.rank_high
        assert row.stats.mean == pytest.approx(means[s])


def _check_letters(lb):
    """Two systems share a letter iff the corrected matrix does not separate them (or they score
    the same); every system has a letter; the best system's first letter is 'a'."""
    rows = {r.rank: r for r in lb.rows}
    assert all(r.letters for r in lb.rows) and lb.rows[0].letters[0] == "a"
    for c in lb.matrix:
        a, b = rows[c.rank_higher], rows[c.rank_lower]
        share = bool(set(a.letters) & set(b.letters))
        equal = round(a.stats.mean, 12) == round(b.stats.mean, 12)
        assert share == (equal or not c.distinguishable), (c.higher, c.lower)


def _check_clique_groups(lb):
    """§8.1: no group joins two systems that differ; equal scores never split; a group closes only
    when the next system differs from one of its members."""
    rows = {r.rank: r for r in lb.rows}
    distinct = {(c.rank_higher, c.rank_lower): c.distinguishable for c in lb.matrix}
    names = [r.stats.system for r in lb.rows]
    assert [s for g in lb.tie_groups for s in g.systems] == names
    for g in lb.tie_groups:
        ranks = range(g.first_rank, g.last_rank + 1)
        for i, j in itertools.combinations(ranks, 2):
            equal = round(rows[i].stats.mean, 12) == round(rows[j].stats.mean, 12)
            assert equal or not distinct[(i, j)]
    for g, nxt in itertools.pairwise(lb.tie_groups):
        assert round(rows[g.last_rank].stats.mean, 12) != round(rows[nxt.first_rank].stats.mean, 12)
        block = [
            r for r in range(nxt.first_rank, nxt.last_rank + 1) if rows[r].stats.mean == rows[nxt.first_rank].stats.mean
        ]
        assert any(distinct[(i, j)] for i in range(g.first_rank, g.last_rank + 1) for j in block)


@pytest.mark.parametrize(
    ("name", "cluster"),
    [("swebench_lite", None), ("swebench_lite", "group"), ("terminal_bench_core_0.1.1", "group"), ("tau2_bench", None)],
)
def test_letters_and_tie_groups_match_the_matrix_pair_by_pair(name, cluster):
    lb = L.leaderboard(load_records(str(shared_dataset(name))), cluster=cluster, matrix=True)
    _check_letters(lb)
    _check_clique_groups(lb)
    assert lb.ties == "cliques" and lb.letters_note is None


def test_swebench_lite_equal_scores_share_a_group_and_a_letter():
    lb = L.leaderboard(load_records(str(shared_dataset("swebench_lite"))), matrix=True)
    by_rank = {r.rank: r for r in lb.rows}
    assert by_rank[27].stats.mean == by_rank[28].stats.mean  # the example: 0.237 and 0.237
    group = next(g for g in lb.tie_groups if g.first_rank <= 27 <= g.last_rank)
    assert group.last_rank >= 28
    assert set(by_rank[27].letters) & set(by_rank[28].letters)


def _brute_force_sharing(separated):
    n = separated.shape[0]
    letters = compact_letters(separated)
    for i, j in itertools.combinations(range(n), 2):
        assert bool(set(letters[i]) & set(letters[j])) == (not separated[i, j])
    assert all(letters)
    return letters


def test_compact_letters_exact_on_random_significance_patterns():
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 12))
        if trial % 2:  # leaderboard-like: separation grows with the rank distance
            pos = np.sort(rng.normal(size=n))
            sep = np.abs(pos[:, None] - pos[None, :]) > rng.uniform(0.2, 1.5)
        else:
            sep = rng.random((n, n)) < rng.uniform(0, 1)
            sep = np.triu(sep, 1)
            sep = sep | sep.T
        _brute_force_sharing(sep)


def test_compact_letters_worked_example_and_sweep():
    # a chain a-b-c-d where only neighbours are tied: letters ab, bc, cd
    sep = np.ones((4, 4), dtype=bool)
    for i in range(3):
        sep[i, i + 1] = sep[i + 1, i] = False
    np.fill_diagonal(sep, False)
    assert compact_letters(sep) == (("a",), ("a", "b"), ("b", "c"), ("c",))
    assert compact_letters(np.zeros((3, 3), dtype=bool)) == (("a",), ("a",), ("a",))
    assert letter_name(0) == "a" and letter_name(26) == "A" and letter_name(52) == "a2"


def test_rank_intervals_cover_the_true_ranks_simultaneously():
    """Seeded simulation: 8 systems 0.3 pp apart on shared tasks (a near-null board, where wrong
    directions are likeliest). Holm intervals must hold every true rank at once in >= 95 % of
    boards (minus 3 simulation standard errors); uncorrected intervals fall below 95 %, which is
    what this test would see if the correction were dropped."""
    rng = np.random.default_rng(20)
    p = 0.5 + 0.003 * np.arange(8)[::-1]
    true_rank = {f"s{i}": i + 1 for i in range(len(p))}
    n_tasks, reps = 200, 100
    hit = {"holm": 0, "none": 0}
    for _ in range(reps):
        ease = rng.normal(size=n_tasks)  # tasks share difficulty: outcomes are correlated across systems
        logit = np.log(p / (1 - p))[:, None] + 1.5 * ease[None, :]
        y = (rng.random((len(p), n_tasks)) < 1 / (1 + np.exp(-logit))).astype(int)
        rows = [
            {"system": f"s{s}", "task_id": f"t{t}", "outcome": int(y[s, t])}
            for s in range(len(p))
            for t in range(n_tasks)
        ]
        rec = from_rows(rows)
        for corr in hit:
            lb = L.leaderboard(rec, correction=corr)
            hit[corr] += all(r.rank_low <= true_rank[r.stats.system] <= r.rank_high for r in lb.rows)
    se = math.sqrt(0.05 * 0.95 / reps)
    assert hit["holm"] / reps >= 0.95 - 3 * se
    assert hit["none"] / reps < 0.95


def test_unequal_task_sets_on_tau2_bench():
    lb = L.leaderboard(load_records(str(shared_dataset("tau2_bench"))))
    u = lb.unequal_task_sets
    assert u is not None and u.code == "unequal_task_sets"
    assert (u.min_tasks, u.max_tasks) == (50, 164)
    rec = load_records(str(shared_dataset("tau2_bench")))
    obs = rec.observed.astype(int)
    common = obs @ obs.T
    np.fill_diagonal(common, 10**9)
    assert u.smallest_overlap == common.min() == 20
    ia, ib = rec.systems.index(u.pair[0]), rec.systems.index(u.pair[1])
    assert common[ia, ib] == 20 and str(u.smallest_overlap) in u.message
    assert L.leaderboard(load_records(str(shared_dataset("swebench_lite")))).unequal_task_sets is None


def test_adjacent_leads_carry_a_paired_interval():
    rec = load_records(str(shared_dataset("terminal_bench_core_0.1.1")))
    lb = L.leaderboard(rec, cluster="group", level=0.9)
    for c in lb.adjacent:
        ia, ib = rec.systems.index(c.higher), rec.systems.index(c.lower)
        d = rec.y[ia] - rec.y[ib]
        cl = E.clustered_se(d, group_labels(rec, "group")[0])
        q = stats.t.ppf(0.95, cl.n_clusters - 1)
        assert (c.ci_low, c.ci_high) == pytest.approx((d.mean() - q * cl.se, d.mean() + q * cl.se), rel=1e-9)
        assert c.ci_method == "paired_t_clustered"


# --------------------------------------------------------------------------- letters against the first implementation


def _members(c):
    return [i for i in range(c.bit_length()) if c >> i & 1]


def _reference_insert(sep, limit):
    """The first implementation's insert-and-absorb (list scans), unordered."""

    def absorb(new, kept):
        out = list(kept)
        for c in sorted(set(new), key=lambda m: -m.bit_count()):
            if not any(c | d == d for d in out):
                out.append(c)
        return out

    cols = [(1 << sep.shape[0]) - 1]
    for i, j in zip(*np.nonzero(np.triu(sep, 1)), strict=True):
        both = (1 << int(i)) | (1 << int(j))
        hit = [c for c in cols if c & both == both]
        if not hit:
            continue
        rest = [c for c in cols if c & both != both]
        split = [c & ~(1 << int(i)) for c in hit] + [c & ~(1 << int(j)) for c in hit]
        cols = absorb(split, rest)
        if len(cols) > limit:
            raise letters.TooManyLetters(f"more than {limit} letter columns would be needed")
    return cols


def _reference_letter_columns(separated, limit=letters.MAX_LETTER_COLUMNS):
    """The first, slow ``letter_columns`` (list scans, a numpy update per member), kept verbatim
    but for ``limit`` and its insert taken apart (``_reference_insert``): the fast one must
    return exactly its columns, in its order."""
    members = _members

    def key(c):
        return tuple(members(c))

    sep = np.asarray(separated, dtype=bool)
    n = sep.shape[0]
    if n == 0:
        return []
    cols = _reference_insert(sep, limit)
    cols.sort(key=key)
    cover = np.zeros((n, n), dtype=np.int64)
    for c in cols:
        m = members(c)
        cover[np.ix_(m, m)] += 1
    out = list(cols)
    for k in range(len(out)):
        for x in members(out[k]):
            others = [y for y in members(out[k]) if y != x]
            if others and not np.all(cover[x, others] >= 2):
                continue
            if not others and cover[x, x] < 2:
                continue
            cover[x, members(out[k])] -= 1
            cover[members(out[k]), x] -= 1
            cover[x, x] += 1
            out[k] &= ~(1 << x)
    kept = []
    for c in sorted((c for c in out if c), key=lambda m: -m.bit_count()):
        if not any(c | d == d for d in kept):
            kept.append(c)
    kept.sort(key=key)
    return kept


def _random_separation(rng, kind):
    """A symmetric significance pattern: ``uniform`` density, ``ranked`` (systems on a line,
    separated past a distance, as on leaderboards), or ``banded`` (separated far apart, at
    random at middle distances: many letter columns)."""
    if kind == "uniform":
        n = int(rng.integers(0, 30))
        sep = np.triu(rng.random((n, n)) < rng.uniform(0, 1), 1)
        return sep | sep.T
    n = int(rng.integers(2, 48))
    if kind == "ranked":
        pos = np.sort(rng.normal(size=n))
        return np.abs(pos[:, None] - pos[None, :]) > rng.uniform(0.05, 2.0)
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    noise = np.triu(rng.random((n, n)), 1)
    near, far = sorted(rng.integers(1, max(3, n // 2), size=2))
    return (d > far) | ((d > near) & (noise + noise.T < rng.uniform(0.2, 0.8)))


@pytest.mark.parametrize("kind", ["uniform", "ranked", "banded"])
def test_letter_columns_equal_the_reference_implementation(kind):
    rng = np.random.default_rng({"uniform": 41, "ranked": 42, "banded": 43}[kind])
    for _ in range(150):
        sep = _random_separation(rng, kind)
        assert letters.letter_columns(sep) == _reference_letter_columns(sep)


def test_letter_columns_refuse_exactly_when_more_columns_are_needed(monkeypatch):
    """Refused iff the insert ends with more columns than the limit."""
    monkeypatch.setattr(letters, "MAX_LETTER_COLUMNS", 24)
    rng = np.random.default_rng(44)
    refused = 0
    for trial in range(120):
        sep = _random_separation(rng, ("ranked", "banded")[trial % 2])
        if len(_reference_insert(sep, limit=10**9)) > 24:
            refused += 1
            with pytest.raises(letters.TooManyLetters, match="more than 24 letter columns"):
                letters.letter_columns(sep)
        else:
            assert letters.letter_columns(sep) == _reference_letter_columns(sep, limit=10**9)
    assert 10 <= refused <= 110  # both outcomes were exercised


def test_letters_are_shown_where_the_insert_passed_the_limit_on_the_way(monkeypatch):
    """The insert can hold more columns on the way than at its end; the limit is on the end."""
    rng = np.random.default_rng(47)
    shown = 0
    for trial in range(400):
        sep = _random_separation(rng, ("uniform", "ranked")[trial % 2])
        needed = len(_reference_insert(sep, limit=10**9)) if sep.shape[0] else 0
        try:
            _reference_insert(sep, limit=needed)
        except letters.TooManyLetters:
            monkeypatch.setattr(letters, "MAX_LETTER_COLUMNS", needed)
            assert letters.letter_columns(sep) == _reference_letter_columns(sep, limit=10**9)
            shown += 1
    assert shown >= 10


def test_letter_columns_fall_back_to_the_insert_when_the_search_is_long(monkeypatch):
    """Past ``MAX_LETTER_SEARCH`` nodes the insert-and-absorb decides, limit on the way included."""
    monkeypatch.setattr(letters, "MAX_LETTER_COLUMNS", 24)
    monkeypatch.setattr(letters, "MAX_LETTER_SEARCH", 5)
    rng = np.random.default_rng(45)
    fell_back = refused = 0
    for trial in range(120):
        sep = _random_separation(rng, ("ranked", "banded")[trial % 2])
        fell_back += letters._maximal_sets(sep) is None if len(_reference_insert(sep, 10**9)) <= 24 else 0
        try:
            expected = _reference_letter_columns(sep, limit=24)
        except letters.TooManyLetters as exc:
            refused += 1
            with pytest.raises(letters.TooManyLetters, match=str(exc)):
                letters.letter_columns(sep)
        else:
            assert letters.letter_columns(sep) == expected
    assert fell_back >= 10 and refused >= 10


def test_maximal_sets_are_the_inserts_columns():
    """The direct search finds the insert's columns, as sets, on every kind of pattern."""
    rng = np.random.default_rng(46)
    for trial in range(300):
        sep = _random_separation(rng, ("uniform", "ranked", "banded")[trial % 3])
        if sep.shape[0] == 0:
            continue
        assert sorted(letters._maximal_sets(sep)) == sorted(_reference_insert(sep, limit=10**9))


def test_letter_columns_edge_patterns():
    for n in (1, 2, 5):
        for sep in (np.zeros((n, n), dtype=bool), ~np.eye(n, dtype=bool)):
            assert letters.letter_columns(sep) == _reference_letter_columns(sep)
    assert letters.letter_columns(np.zeros((0, 0), dtype=bool)) == []
    assert letters.letter_columns(~np.eye(3, dtype=bool)) == [1, 2, 4]
    # pairs (0, 3), (1, 2), then (1, 3): both splits of the column {1, 3} are absorbed
    sep = np.zeros((4, 4), dtype=bool)
    for i, j in [(0, 3), (1, 2), (1, 3)]:
        sep[i, j] = sep[j, i] = True
    assert letters.letter_columns(sep) == _reference_letter_columns(sep) == [3, 5, 12]


def test_scores_equal_but_for_rounding_are_tied_everywhere():
    """A's trials 0.1 and 0.2 average to 0.15000000000000002 on every task, B's and C's single
    trial is 0.15: a constant difference of 2.8e-17 with a zero standard error was p = 0, so A
    ranked 1-1 ahead of B and C while the letters and tie groups (equal to 12 decimals) tied
    all three. Now every view ties them."""
    rows = []
    for t in range(30):
        g = f"g{t % 5}"
        rows += [{"system": "A", "task_id": f"t{t}", "group": g, "trial": 0, "outcome": 0.1},
                 {"system": "A", "task_id": f"t{t}", "group": g, "trial": 1, "outcome": 0.2},
                 {"system": "B", "task_id": f"t{t}", "group": g, "outcome": 0.15},
                 {"system": "C", "task_id": f"t{t}", "group": g, "outcome": 0.15}]
    rec = from_rows(rows)
    assert rec.y[rec.systems.index("A")][0] != 0.15  # the rounding this is about
    for cluster in (None, "group"):
        lb = L.leaderboard(rec, cluster=cluster, matrix=True)
        assert [(r.rank_low, r.rank_high) for r in lb.rows] == [(1, 3)] * 3
        assert all(c.p_value == 1.0 and not c.distinguishable for c in lb.matrix)
        assert len({r.letters for r in lb.rows}) == 1


def test_a_flat_difference_is_judged_by_a_sign_test_over_its_units():
    """Every unit (task, or cluster) showing the same difference made the standard error 0 (or
    its rounding, 1e-17) and p = 0: two clusters, or two tasks, were a certain lead. Such a
    difference now gets the exact sign test over its G units, 2^(1-G): 0.5 for two."""
    def board(n_tasks, groups, wins, trials=2):
        rows = []
        for t in range(n_tasks):
            a = 1.0 if t in wins else 0.5
            for k in range(trials):
                rows += [{"system": "A", "task_id": f"t{t}", "group": f"g{t * groups // n_tasks}", "trial": k,
                          "outcome": float(k < 2 * a)},
                         {"system": "B", "task_id": f"t{t}", "group": f"g{t * groups // n_tasks}", "trial": k,
                          "outcome": float(k < 1) if t in wins or a == 0.5 else 0.0}]
        return from_rows(rows)

    two_clusters = board(100, 2, wins={0, 50})  # one win for A in each cluster of 50
    lb = L.leaderboard(two_clusters, cluster="group", matrix=True)
    (c,) = lb.matrix
    assert c.diff == pytest.approx(0.01) and c.p_value == 0.5 and not c.distinguishable
    assert [(r.rank_low, r.rank_high) for r in lb.rows] == [(1, 2), (1, 2)]
    two_tasks = board(2, 1, wins={0, 1})  # A half ahead on both tasks of two trials
    (c,) = L.leaderboard(two_tasks, matrix=True).matrix
    assert c.test == "paired_t" and c.p_value == 0.5
    many = board(40, 1, wins=set(range(40)))
    (c,) = L.leaderboard(many, matrix=True).matrix
    assert c.p_value == 2.0 ** -39 and c.distinguishable


def test_equal_scores_share_a_rank_interval_as_they_share_a_letter():
    """A ran only the harder half and scores 0.5 there; B scores 0.5 over all tasks but 0.2 on
    the half they share, a significant difference. Their rank intervals were 1-1 and 2-2 while
    their letters and tie group joined them; a lead between equal scores now moves no bound."""
    rows = []
    for t in range(200):
        if t >= 100:
            rows.append({"system": "A", "task_id": f"t{t}", "outcome": float(t < 150)})
        rows.append({"system": "B", "task_id": f"t{t}", "outcome": float(t < 80 or 100 <= t < 120)})
        rows.append({"system": "C", "task_id": f"t{t}", "outcome": float(t < 60)})
    lb = L.leaderboard(from_rows(rows), matrix=True)
    a_b = next(c for c in lb.matrix if {c.higher, c.lower} == {"A", "B"})
    assert a_b.distinguishable  # the test itself still says so
    top = [r for r in lb.rows if r.stats.system in ("A", "B")]
    assert [(r.rank_low, r.rank_high) for r in top] == [(1, 2), (1, 2)]
    assert top[0].letters == top[1].letters

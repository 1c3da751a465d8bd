"""``engine.binom`` against ``scipy.stats.binom``: the same bits, edges included."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from service.engine import binom

K = np.array([-np.inf, -3, -1, -0.5, 0, 0.5, 1, 2, 2.7, 3, 5, 7, 10, 11, 40, 199, 200, 201, np.inf, np.nan])
N = np.array([0, 1, 3, 5, 10, 40, 200, -1, 2.5, np.nan])
P = np.array([0.0, 1e-300, 1e-9, 0.05, 0.3, 0.5, 0.7, 1 - 1e-12, 1.0, -0.1, 1.1, np.nan])


@pytest.mark.parametrize("name", ["pmf", "cdf", "sf"])
def test_same_bits_as_scipy_stats(name):
    k, n, p = np.meshgrid(K, N, P, indexing="ij")
    ours = getattr(binom, name)(k, n, p)
    theirs = getattr(stats.binom, name)(k, n, p)
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)  # NaN where theirs is NaN, else equal bits


@pytest.mark.parametrize("name", ["pmf", "cdf", "sf"])
def test_scalars_and_broadcasting(name):
    f, g = getattr(binom, name), getattr(stats.binom, name)
    assert f(3, 10, 0.4) == g(3, 10, 0.4)
    assert np.ndim(f(3, 10, 0.4)) == 0
    ks = np.arange(12)[None, :]
    ns = np.array([[5], [10]])
    np.testing.assert_array_equal(f(ks, ns, 0.25), g(ks, ns, 0.25))


def test_random_arguments():
    rng = np.random.default_rng(7)
    n = rng.integers(0, 500, 2000)
    k = rng.integers(-5, 505, 2000)
    p = rng.random(2000)
    for name in ("pmf", "cdf", "sf"):
        np.testing.assert_array_equal(getattr(binom, name)(k, n, p), getattr(stats.binom, name)(k, n, p))


def test_fallback_is_scipy_stats(monkeypatch):
    """A scipy without the ufuncs: the module answers with ``scipy.stats.binom`` itself."""
    for attr in ("_PMF", "_CDF", "_SF"):
        monkeypatch.setattr(binom, attr, None)
    assert binom.cdf(3, 10, 0.4) == stats.binom.cdf(3, 10, 0.4)
    assert binom.sf(3, 10, 0.4) == stats.binom.sf(3, 10, 0.4)
    assert binom.pmf(3, 10, 0.4) == stats.binom.pmf(3, 10, 0.4)


def test_normal_quantiles_as_scipy_stats():
    """The engine's normal quantiles, by ``special.ndtri`` where ``stats.norm`` was: equal bits."""
    from service.engine.schedule import spent
    from service.engine.statbase import _z

    for level in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999999):
        assert _z(level) == float(stats.norm.ppf(0.5 + level / 2.0))
    t = np.linspace(0.0, 1.0, 11)
    for a in (0.01, 0.05, 0.2):
        z = stats.norm.isf(a / 2.0)
        with np.errstate(divide="ignore"):
            want = np.where(t > 0, 2.0 * stats.norm.cdf(-z / np.sqrt(t)), 0.0)
        np.testing.assert_array_equal(spent(t, a, "obrien_fleming"), want)


def test_a_replay_does_not_import_scipy_stats():
    """``scipy.stats`` costs a process about a second to import: the CLI's replay (finite B,
    exact, 0/1 and lattice records) must not load it, nor may the engine at import."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        import service.cli, service.commands.replay
        from service.engine.records import from_rows
        from service.engine.replay import run_replay
        from service.engine.spec import make_spec
        import numpy as np
        rng = np.random.default_rng(1)
        for outcomes in (rng.integers(0, 2, (3, 40)).astype(float), rng.integers(0, 3, (3, 40)) / 2.0):
            rows = [{"system": f"s{i}", "task_id": f"t{j}", "outcome": float(outcomes[i, j])}
                    for i in range(3) for j in range(40)]
            records = from_rows(rows)
            for b in (200, "exact"):
                spec = make_spec(policies=["coverage_bootstrap"], deltas=[0], orders=20, groups=[None], bootstrap=[b])
                run_replay(records, spec, jobs=1)
        print("scipy.stats" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"

"""0/1 tail tables shared by the processes of a host (engine/tail_tables.py).

A tail another process computed must be read, not computed again, and must be the very
number this process would compute; sharing must never be taken up in a directory others
may write, and must fall back to this process's own tables when the files cannot be made.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from service.engine import rules as R
from service.engine import tail_tables
from service.engine import tails as T

REPO = Path(__file__).resolve().parents[2]

# a process of its own: shares ``dir``, computes the tails and B = 200 conclusions of seed's
# samples, prints how many tails it computed (misses) and their bits
CHILD = """
import sys, numpy as np
from service.engine import rules as R, tail_tables, tails as T
assert tail_tables.share(sys.argv[1]) is not None
rng = np.random.default_rng(int(sys.argv[2]))
k = rng.choice([40, 120, 300], 400); a = rng.integers(0, k + 1); b = rng.integers(0, k - a + 1)
c = rng.integers(-3, 4, 400) + np.rint(0.02 * k).astype(int)
computed = []
now = T._tails_now
T._tails_now = lambda *x: computed.append(len(x[0])) or now(*x)
tails = R.tail_binary(k, a, b, c)
conclude = R.conclude_binary(k, a, b, c, 0.05, 200)
print(sum(computed), np.concatenate([tails, conclude]).tobytes().hex())
"""


def _samples(seed: int):
    rng = np.random.default_rng(seed)
    k = rng.choice([40, 120, 300], 400)
    a = rng.integers(0, k + 1)
    b = rng.integers(0, k - a + 1)
    c = rng.integers(-3, 4, 400) + np.rint(0.02 * k).astype(int)
    return k, a, b, c


def _child(directory: Path, seed: int) -> tuple[int, np.ndarray]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(directory), str(seed)], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    return int(out[0]), np.frombuffer(bytes.fromhex(out[1]), dtype=np.float64)


def _mapped(table: np.ndarray) -> bool:
    base = table
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base is not None


@pytest.fixture(autouse=True)
def own_tables(monkeypatch):
    monkeypatch.setattr(T, "_dense", type(T._dense)())
    monkeypatch.setattr(T, "_TAIL_MEMO", {})


def test_cells_hold_any_value_exactly_and_zero_reads_as_missing():
    values = np.array([0.0, -0.0, 1.0, 1e-300, 5e-324, 0.05, 1 - 2**-53, np.inf])
    np.testing.assert_array_equal(tail_tables.decode(tail_tables.encode(values)).view(np.uint64),
                                  values.view(np.uint64))
    assert np.isnan(tail_tables.decode(np.zeros(3, dtype=np.uint64))).all()


def test_a_process_reads_the_tails_another_computed_and_they_are_its_own_numbers(tmp_path):
    shared = tmp_path / "tails"
    first_computed, first = _child(shared, 1)
    assert first_computed > 100  # a fresh directory: it computed them
    again_computed, again = _child(shared, 1)
    assert again_computed == 0  # every one read from the first process's files
    np.testing.assert_array_equal(again.view(np.uint64), first.view(np.uint64))
    k, a, b, c = _samples(1)
    own = np.concatenate([R.tail_binary(k, a, b, c), R.conclude_binary(k, a, b, c, 0.05, 200)])  # not shared here
    np.testing.assert_array_equal(first.view(np.uint64), own.view(np.uint64))
    np.testing.assert_allclose(first[:400], R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-11)
    overlap_computed, _ = _child(shared, 2)  # other samples: the keys met before are read
    assert overlap_computed < first_computed


def test_processes_at_the_same_time_agree(tmp_path):
    shared = tmp_path / "tails"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(shared), "3"], cwd=REPO, stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].split()[1] for p in procs]
    assert len(set(outs)) == 1
    k, a, b, c = _samples(3)
    assert bytes.fromhex(outs[0]) == np.concatenate(
        [R.tail_binary(k, a, b, c), R.conclude_binary(k, a, b, c, 0.05, 200)]).tobytes()


def test_sharing_is_refused_where_others_may_write(tmp_path, caplog):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o777)
    assert tail_tables.share(open_dir) is None
    assert "not shared" in caplog.text
    link = tmp_path / "link"
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link.symlink_to(private)
    assert tail_tables.share(link) is None
    assert tail_tables.share(tmp_path / "missing" / "deeper") is None  # no parents made for it
    sub = tail_tables.share(private)
    assert sub is not None and sub.parent == private and (os.stat(private).st_mode & 0o777) == 0o700


def test_without_the_engines_source_nothing_is_shared(tmp_path, monkeypatch):
    """Versions could not be told apart: a table another version wrote might be read."""
    monkeypatch.setattr(tail_tables, "ENGINE", tmp_path / "empty")
    assert tail_tables.share(tmp_path / "tails") is None and tail_tables._shared is None


def test_the_version_directory_changes_with_the_engines_source(tmp_path, monkeypatch):
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "tails.py").write_text("A = 1\n")
    monkeypatch.setattr(tail_tables, "ENGINE", engine)
    first = tail_tables.share(tmp_path / "tails")
    (engine / "tails.py").write_text("A = 2\n")
    second = tail_tables.share(tmp_path / "tails")
    assert first is not None and second is not None and first != second


def test_tables_fall_back_to_the_process_when_files_cannot_be_made(tmp_path):
    sub = tail_tables.share(tmp_path / "tails")
    assert sub is not None
    k, a, b, c = _samples(4)
    R.tail_binary(k[:10], a[:10], b[:10], c[:10])
    assert T._dense and all(t.shared is not None and _mapped(t.shared) for t in T._dense.values())
    T._dense.clear()
    for f in sub.iterdir():
        f.unlink()
    sub.rmdir()  # the directory is gone: no file can be created
    got = R.tail_binary(k, a, b, c)
    np.testing.assert_allclose(got, R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-11)
    assert T._dense and all(t.shared is None for t in T._dense.values())


def test_files_past_the_cap_are_deleted_and_numbers_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(tail_tables, "CHECK_EVERY", 2)
    sub = tail_tables.share(tmp_path / "tails", cap_bytes=8 * 41 * 41 * 3)  # room for three tables of k = 40
    assert sub is not None
    k, a, b, c = _samples(5)
    k = np.full_like(k, 40)
    a, b = np.minimum(a, 20), np.minimum(b, 20)
    c = np.arange(400) % 9 - 4  # nine tables of k = 40
    got = R.tail_binary(k, a, b, c)
    assert len(list(sub.iterdir())) <= 3
    np.testing.assert_allclose(got, R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-11)


def test_other_versions_tables_are_deleted_once_stale(tmp_path):
    root = tmp_path / "tails"
    root.mkdir(mode=0o700)
    stale, recent = root / "0123456789abcdef", root / "fedcba9876543210"
    for d in (stale, recent):
        d.mkdir()
        (d / "40-x").write_bytes(b"\0" * 8)
    old = time.time() - tail_tables.STALE_SECONDS - 60
    os.utime(stale, (old, old))
    sub = tail_tables.share(root)
    assert sub is not None and sub.exists() and not stale.exists() and recent.exists()


def test_the_settings_say_where_tails_are_shared(tmp_path):
    from service.config import Settings

    assert Settings(shared_tails_dir="off").shared_tails_path is None
    assert Settings(shared_tails_dir=tmp_path / "t").shared_tails_path == tmp_path / "t"
    auto = Settings().shared_tails_path
    if Path("/dev/shm").is_dir():
        assert auto == Path(f"/dev/shm/sufficiency-tails-{os.getuid()}")
    sub = Settings(shared_tails_dir=str(tmp_path / "t")).share_tails()
    assert sub is not None and sub.parent == tmp_path / "t" and tail_tables._shared is not None
    assert Settings(shared_tails_dir="off").share_tails() is None and tail_tables._shared is None


def test_a_link_or_another_users_file_in_place_of_a_table_is_not_used(tmp_path):
    sub = tail_tables.share(tmp_path / "tails")
    assert sub is not None
    key, k = (40, 1), 40
    name = sub / f"{k}-{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"\xff" * (41 * 41 * 8))
    name.symlink_to(elsewhere)
    assert tail_tables._shared.table(key, k) is None  # not followed
    assert tail_tables.new_table(key, k).shared is None  # the process's own table instead
    name.unlink()
    if os.getuid() == 0:  # only root can give a file to someone else
        name.write_bytes(b"\0" * (41 * 41 * 8))
        os.chown(name, 12345, 12345)
        assert tail_tables._shared.table(key, k) is None
    name.unlink(missing_ok=True)
    assert tail_tables._shared.table(key, k) is not None  # a file of its own: used

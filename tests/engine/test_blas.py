"""Processes that replay beside others run BLAS on one thread (service/engine/blas.py).

Each check runs in a fresh interpreter, so that the limit it sets stays out of this one and
the default (one thread per core) is what it starts from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

REPORT = """
import json
from threadpoolctl import threadpool_info
print(json.dumps([lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]))
"""


def blas_threads(setup: str) -> set[int]:
    """The thread counts of the BLAS libraries loaded after ``setup`` (numpy's and scipy's)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", setup + REPORT], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts  # some BLAS is loaded: the check is not vacuous
    return set(counts)


def test_one_blas_thread_limits_every_blas_library_unless_the_operator_chose():
    setup = "import numpy\nfrom service.engine.blas import one_blas_thread\none_blas_thread()\n"
    assert blas_threads(setup) == {1}
    assert blas_threads("import os\nos.environ['OPENBLAS_NUM_THREADS'] = '2'\n" + setup) == {2}


@pytest.mark.parametrize("broker", [None, "redis://127.0.0.1:6379/15"])
def test_the_in_process_runner_and_the_celery_worker_set_one_blas_thread(broker, tmp_path):
    setup = (
        "from service.config import Settings\n"
        f"settings = Settings(database_url='sqlite:///{tmp_path / 'b.db'}', broker_url={broker!r})\n"
    )
    if broker:
        setup += "from workers.app import create_worker_app\ncreate_worker_app(settings)\n"
    else:
        setup += (
            "from service.jobs import TaskContext\nfrom service.main import build_runner\n"
            "import threading\n"
            "build_runner(settings, TaskContext.__new__(TaskContext))\n"
        )
    assert blas_threads(setup) == {1}


def test_blas_single_thread_limits_a_stretch_and_restores_the_setting():
    """The lattice bootstrap's brackets run on one thread; the process's own setting (here the
    default, one per core on this machine) is back afterwards."""
    setup = (
        "import numpy, json\nfrom threadpoolctl import threadpool_info\n"
        "from service.engine.blas import blas_single_thread\n"
        "before = sorted({lib['num_threads'] for lib in threadpool_info() if lib['user_api'] == 'blas'})\n"
        "with blas_single_thread():\n"
        "    inside = sorted({lib['num_threads'] for lib in threadpool_info() if lib['user_api'] == 'blas'})\n"
        "print(json.dumps([before, inside]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", setup + REPORT], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    before, inside = json.loads(lines[-2])
    after = json.loads(lines[-1])
    assert inside == [1]
    assert sorted(set(after)) == before
    if os.cpu_count() and os.cpu_count() > 1:
        assert before != [1]  # the default is several threads: the limit is not vacuous


def test_blas_single_thread_reaches_a_library_loaded_after_its_first_use():
    """The libraries are looked up once and kept; scipy's own BLAS, loaded after that first
    look-up, is limited too."""
    setup = (
        "import numpy, json\nfrom threadpoolctl import threadpool_info\n"
        "from service.engine.blas import blas_single_thread\n"
        "with blas_single_thread():\n"
        "    pass\n"
        "import scipy.linalg\n"
        "n_libs = len([lib for lib in threadpool_info() if lib['user_api'] == 'blas'])\n"
        "with blas_single_thread():\n"
        "    inside = sorted({lib['num_threads'] for lib in threadpool_info() if lib['user_api'] == 'blas'})\n"
        "print(json.dumps([n_libs, inside]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", setup], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    n_libs, inside = json.loads(out.stdout.strip().splitlines()[-1])
    assert n_libs >= 1 and inside == [1]  # here two libraries, numpy's and scipy's

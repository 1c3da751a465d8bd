"""Stand-in for ``service.engine.replay`` / ``report`` while they are being written.

Follows docs/engine-api.md closely enough to exercise the service (chunking, storage,
merge, metric rows). Installed by the fixtures only when the real modules are absent.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import types
from dataclasses import dataclass

import numpy as np


@dataclass
class Plan:
    records: object
    spec: object
    pairs: list[tuple[int, int]]

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)


@dataclass
class ChunkResult:
    start: int
    stop: int
    rows: list[dict]

    def to_bytes(self) -> bytes:
        return json.dumps({"start": self.start, "stop": self.stop, "rows": self.rows}).encode()

    @classmethod
    def from_bytes(cls, b: bytes) -> ChunkResult:
        d = json.loads(b)
        return cls(d["start"], d["stop"], d["rows"])


def plan_replay(records, spec) -> Plan:
    from service.engine.records import filter_systems, group_labels
    from service.engine.spec import SpecError

    recs, _ = filter_systems(records, spec.min_task_coverage)
    for g in spec.groups:
        try:
            group_labels(recs, g)
        except ValueError as exc:
            raise SpecError("groups", str(exc)) from None
    if recs.n_systems < 2:
        raise SpecError("min_task_coverage", "fewer than 2 systems")
    pairs = [(a, b) for a in range(recs.n_systems) for b in range(recs.n_systems) if a != b]
    return Plan(recs, spec, pairs)


def run_chunk(plan: Plan, start: int, stop: int, progress=None) -> ChunkResult:
    rows = []
    for i in range(start, stop):
        a, b = plan.pairs[i]
        rng = np.random.default_rng(np.random.SeedSequence(plan.spec.seed, spawn_key=(i,)))
        d = plan.records.y[a] - plan.records.y[b]
        draws = rng.random(plan.spec.orders)
        rows.append({"pair": i, "delta_full": float(np.nanmean(d)), "noise": float(draws.mean())})
        time.sleep(float(os.environ.get("SUFFICIENCY_STUB_PAIR_SECONDS", "0")))
        if progress:
            progress(plan.spec.orders)
    return ChunkResult(start, stop, rows)


def build_report(plan: Plan, chunks) -> dict:
    rows = sorted((r for c in chunks for r in c.rows), key=lambda r: r["pair"])
    assert [r["pair"] for r in rows] == list(range(plan.n_pairs))
    return {"spec": plan.spec.to_dict(), "pairs": rows}


def run_replay(records, spec, jobs=1, progress=None) -> dict:
    plan = plan_replay(records, spec)
    return build_report(plan, [run_chunk(plan, 0, plan.n_pairs, progress)])


def report_json(report: dict) -> bytes:
    return (json.dumps(report, sort_keys=True, indent=2) + "\n").encode()


def report_csv(report: dict) -> str:
    return "pair,delta_full\n" + "".join(f"{r['pair']},{r['delta_full']}\n" for r in report["pairs"])


def metric_rows(report: dict) -> list[dict]:
    spec = report["spec"]
    mean = float(np.mean([r["noise"] for r in report["pairs"]]))
    return [
        {"policy": p["name"], "group": spec["groups"][0], "floor": spec["floors"][0], "a": spec["a"][0],
         "bootstrap": spec["bootstrap"][0], "delta": d, "budget": b, "metric": m, "value": mean * b}
        for p in spec["policies"] for d in spec["deltas"] for b in spec["budgets"]
        for m in ("false_accept_rate", "defer_rate")
    ]


def install() -> bool:
    """Register the stub as the engine's replay/report modules if they do not exist yet."""
    try:
        importlib.import_module("service.engine.replay")
        importlib.import_module("service.engine.report")

        return False
    except ModuleNotFoundError:
        pass
    this = sys.modules[__name__]
    for name in ("service.engine.replay", "service.engine.report"):
        mod = types.ModuleType(name)
        mod.__dict__.update({k: getattr(this, k) for k in (
            "Plan", "ChunkResult", "plan_replay", "run_chunk", "build_report", "run_replay",
            "report_json", "report_csv", "metric_rows")})
        sys.modules[name] = mod
    return True

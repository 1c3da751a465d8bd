"""``/v1/stats/*`` calculators and ``/v1/datasets/{id}/leaderboard`` (SPEC §8)."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Query
from pydantic import ValidationError

from service import limits
from service.datasets import service as datasets
from service.deps import SessionDep, SettingsDep
from service.engine import evalstats as E
from service.engine.intervals import binomial_bounds
from service.engine.passk import pass_at_k, pass_hat_k
from service.engine.samplesize import (
    margin_of_error,
    min_significant_gap,
    runs_for_bound,
    tasks_for_margin,
    tasks_for_paired_difference,
)
from service.engine.statbase import StatsInputError, to_dict
from service.errors import NotFound, Unprocessable, responses
from service.json_body import StrictJSONRoute
from service.stats import boards
from service.stats import schemas as S

router = APIRouter(tags=["statistics"], route_class=StrictJSONRoute)

_ERRORS = responses(Unprocessable)


def _invalid(exc: StatsInputError) -> Unprocessable:
    return Unprocessable([{"field": exc.field, "message": exc.message}])


def _out_of_range() -> Unprocessable:
    return Unprocessable([{"field": "body", "message": "the inputs are too close to 0 or 1 for a finite answer"}])


@router.post("/v1/stats/passk", response_model=S.PassKCurveRead, responses=_ERRORS,
             summary="Unbiased pass@k and pass^k of one task from c passes in n trials")
def passk(body: S.PassKCreate) -> S.PassKCurveRead:
    ks = [body.k] if body.k is not None else list(range(1, body.n + 1))
    try:
        values = [S.PassKRead(k=k, pass_at_k=pass_at_k(body.n, body.c, k), pass_hat_k=pass_hat_k(body.n, body.c, k))
                  for k in ks]
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None
    return S.PassKCurveRead(n=body.n, c=body.c, values=values)


@router.post("/v1/stats/bound", response_model=S.BoundRead, responses=_ERRORS,
             summary="Exact one-sided binomial bounds (Clopper–Pearson; zero failures: 1 - α^(1/n))")
def bound(body: S.BoundCreate):
    try:
        return to_dict(binomial_bounds(body.successes, body.n, body.level))
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None


@router.post("/v1/stats/runs", response_model=S.RunsRead, responses=_ERRORS,
             summary="Fewest runs for an exact upper failure-rate bound at most a target")
def runs(body: S.RunsCreate) -> S.RunsRead:
    try:
        n = runs_for_bound(body.max_failure_rate, body.level, body.failures)
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None
    return S.RunsRead(runs=n, max_failure_rate=body.max_failure_rate, failures=body.failures, level=body.level)


@router.post("/v1/stats/margin", response_model=S.MarginRead, responses=_ERRORS,
             summary="Margin of error of a score: z·sqrt(p(1-p)/n)")
def margin(body: S.MarginCreate) -> S.MarginRead:
    try:
        m = margin_of_error(body.n, body.p, body.level)
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None
    if not np.isfinite(m):
        raise _out_of_range()
    return S.MarginRead(n=body.n, p=body.p, level=body.level, margin=m)


@router.post("/v1/stats/tasks", response_model=S.TasksRead, responses=_ERRORS,
             summary="Tasks needed for a target margin of error")
def tasks(body: S.TasksCreate) -> S.TasksRead:
    try:
        n = tasks_for_margin(body.margin, body.p, body.level)
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None
    return S.TasksRead(margin=body.margin, p=body.p, level=body.level, tasks=n)


@router.post("/v1/stats/gap", response_model=S.GapRead, responses=_ERRORS,
             summary="Minimum significant gap between two scores, unpaired vs paired")
def gap(body: S.GapCreate):
    try:
        out = to_dict(min_significant_gap(body.n, body.p, body.rho, body.level))
        return S.GapRead.model_validate(out)
    except ValidationError:  # a gap that is not a finite number
        raise _out_of_range() from None
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None


@router.post("/v1/stats/power", response_model=S.PowerRead, responses=_ERRORS,
             summary="Tasks needed to detect a paired difference with the given power")
def power(body: S.PowerCreate) -> S.PowerRead:
    try:
        n = tasks_for_paired_difference(body.delta, body.power, body.rho, body.p, body.level, body.sd_diff)
    except StatsInputError as exc:
        raise _invalid(exc) from None
    except ArithmeticError:  # an input at the edge of floating point (say 5e-324): no finite answer
        raise _out_of_range() from None
    return S.PowerRead(tasks=n, delta=body.delta, power=body.power, rho=body.rho, level=body.level)


@router.get("/v1/datasets/{dataset_id}/leaderboard", response_model=S.LeaderboardRead,
            responses=responses(NotFound, Unprocessable),
            summary="Systems ranked with intervals, rank intervals and letters; which leads are distinguishable")
def get_leaderboard(
    dataset_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    level: Annotated[float, Query(gt=0.0, lt=1.0)] = 0.95,
    cluster: Annotated[
        str | None, Query(max_length=200, description="Metadata column(s) to cluster by, e.g. 'group'")
    ] = None,
    correction: Literal["holm", "bh", "none"] = "holm",
    matrix: bool = False,
    ties: Literal["cliques", "adjacent", "leader"] = "cliques",
):
    records = datasets.load_records(session, dataset_id)
    limits.check_leaderboard(records.n_systems, settings)
    try:
        board = boards.leaderboard(records, dataset_id, level, cluster, correction, matrix, ties)
    except StatsInputError as exc:
        raise _invalid(exc) from None
    return to_dict(board)


@router.get("/v1/datasets/{dataset_id}/pairs", response_model=S.PairRead,
            responses=responses(NotFound, Unprocessable),
            summary="Paired comparison of two systems, with a seeded paired cluster bootstrap")
def get_pair(
    dataset_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    a: Annotated[str, Query(description="System A")],
    b: Annotated[str, Query(description="System B")],
    level: Annotated[float, Query(gt=0.0, lt=1.0)] = 0.95,
    cluster: Annotated[str | None, Query(max_length=200)] = None,
    boot: Annotated[int, Query(ge=100, le=20000)] = 2000,
    seed: Annotated[int, Query(ge=0)] = 0,
):
    dataset = datasets.get(session, dataset_id)  # (404 before the records are read)
    limits.check_pair_bootstrap(boot, dataset.n_tasks, settings)
    records = datasets.load_records(session, dataset_id)
    try:
        result = E.pair_stats(records, a, b, level, cluster, np.random.default_rng(seed), boot)
    except StatsInputError as exc:
        raise _invalid(exc) from None
    return to_dict(result)

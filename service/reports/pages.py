"""Server-rendered HTML pages: ``/`` (datasets, replays, upload and replay forms),
``/replays/{id}`` (the report), ``/datasets/{id}/leaderboard``; plus their form handlers
and the two static files. Not part of the API document.

Pages load nothing from other origins (CSS and JS are served here, figures are images from
this service), every user-supplied name goes through Jinja2's autoescaping, and every HTML
response carries the security headers of :data:`HTML_HEADERS`.
"""

from __future__ import annotations

import functools
import hashlib
import math
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session

from service.datasets import repository as datasets_repo
from service.datasets import service as datasets
from service.datasets.router import Upload, upload_context
from service.deps import SessionDep, SettingsDep
from service.engine import leaderboard as board_stats
from service.engine import statbase
from service.engine.spec import NAMED_POLICIES
from service.errors import NotFound, ServiceError, Unprocessable
from service.json_body import StrictJSONRoute
from service.limits import check_leaderboard, record_limits
from service.replays import pairs as replay_pairs
from service.replays import repository as replays_repo
from service.replays import service as replays
from service.replays.models import FINISHED
from service.replays.schemas import ReplayCreate
from service.reports import class_figures, figures, view
from service.reports import service as reports
from service.stats import boards

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)

HTML_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STATIC = {"report.css": "text/css; charset=utf-8", "report.js": "text/javascript; charset=utf-8"}


@functools.cache
def _env() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("service.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(rate=view.fmt_rate, budget=view.fmt_budget, pp=view.fmt_pp, pct=_pct,
                       duration=_duration)
    env.globals.update(miss_labels=view.MISS_LABELS)
    return env


def _pct(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{v * 100:.{digits}f} %"


def _duration(seconds: float) -> str:
    """A time left as people say it (the same rounding as report.js)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _env().get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers=HTML_HEADERS)


def _not_found(message: str) -> HTMLResponse:
    return render("error.html", 404, title="Not found", message=message)


@functools.cache
def _static(name: str) -> tuple[bytes, str]:
    body = resources.files("service.reports").joinpath("static", name).read_bytes()
    return body, f'"{hashlib.sha256(body).hexdigest()[:24]}"'


@router.get("/static/{name}")
def static_file(name: str, if_none_match: Annotated[str | None, Header()] = None) -> Response:
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    body, etag = _static(name)
    headers = {"ETag": etag, "Cache-Control": "public, max-age=600", "X-Content-Type-Options": "nosniff"}
    if if_none_match and etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=STATIC[name], headers=headers)


# --------------------------------------------------------------------------- index and forms


def _index(
    session: Session, *, status_code: int = 200, errors: list[str] | None = None, notice: str | None = None,
    selected: str | None = None, form: dict[str, Any] | None = None,
) -> HTMLResponse:
    items, total, _ = datasets_repo.page(session, limit=200, offset=0, max_systems=datasets_repo.LIST_SYSTEMS)
    runs, runs_total = replays_repo.page(session, limit=100, offset=0)
    done = replays.done_counts(session, runs)
    budgets = replays_repo.sufficient_budgets(session, [r.id for r in runs])
    names = {d.id: d.name for d in items}
    replay_rows = []
    for r in runs:
        read = replays.to_read(r, done[r.id])
        policies = ", ".join(p["name"] for p in r.spec.get("policies", []))
        deltas = ", ".join(f"{d:g}" for d in r.spec.get("deltas", []))
        msb = [(f"{m.policy} δ={m.delta:g}" + (f" {m.grouping}" if m.grouping else ""), view.fmt_budget(m.value))
               for m in budgets[r.id]]
        replay_rows.append({"r": read, "dataset": names.get(r.dataset_id, str(r.dataset_id)[:8]),
                            "policies": policies, "deltas": deltas, "msb": msb,
                            "pairs": r.spec.get("pairs", "all")})
    group_columns = sorted({c["name"] for d in items for c in d.summary.get("group_columns", [])})
    chosen = selected or (str(items[0].id) if items else "")
    advice = _grouping_advice(session, next((d for d in items if str(d.id) == chosen), None))
    default_group = "group" if "group" in group_columns and "group" not in advice else ""
    return render(
        "index.html",
        status_code,
        title="Sufficiency",
        datasets=items,
        datasets_total=total,
        replays=replay_rows,
        replays_total=runs_total,
        errors=errors or [],
        notice=notice,
        selected=chosen,
        policies=list(NAMED_POLICIES),
        group_columns=group_columns,
        grouping_advice=advice,
        form=form or {"policies": ["coverage_bootstrap"], "deltas": "0, 5", "orders": "500", "budgets": "",
                      "group": default_group, "seed": "0", "pairs": "all"},
    )


def _grouping_advice(session: Session, dataset: Any) -> dict[str, str]:
    """Group columns of ``dataset`` whose proportional coverage cannot be met below half the
    tasks, each with the reason: the form does not preselect them (SPEC §6 diagnostics)."""
    if dataset is None:
        return {}
    columns = dataset.summary.get("group_columns", [])
    n = dataset.n_tasks
    out: dict[str, str] = {}
    records = None
    for c in columns:
        k = c.get("coverage_from_k", "missing")
        if k == "missing":  # stored before the summary carried it
            if records is None:
                records = datasets.load_records(session, dataset.id)
            k = datasets.coverage_from_k(records.metadata[c["name"]])
        if k is None or k > n / 2:
            fits = "never fits" if k is None else f"first fits at {k} of {n} tasks ({k / n:.0%})"
            out[c["name"]] = (f"grouping by {c['name']} gives {c['n_groups']} groups for {n} tasks: proportional "
                              f"coverage {fits}, so a coverage-aware replay defers every smaller budget")
    return out


@router.get("/", response_class=HTMLResponse)
def index(session: SessionDep, dataset: str | None = None) -> HTMLResponse:
    notice = None
    if dataset:
        try:
            found = datasets_repo.get(session, uuid.UUID(dataset))
        except ValueError:
            found = None
        if found is not None:
            notice = f"Dataset “{found.name}” is stored: {found.n_systems} systems, {found.n_tasks} tasks."
    return _index(session, notice=notice, selected=dataset)


def _problems(detail: Any) -> list[str]:
    if isinstance(detail, list):
        out = []
        for d in detail:
            if isinstance(d, dict):
                where = ", ".join(f"{k} {d[k]}" for k in ("row", "field") if d.get(k) not in (None, ""))
                out.append(f"{where}: {d.get('message', '')}" if where else str(d.get("message", d)))
            else:
                out.append(str(d))
        return out
    return [str(detail)]


async def _form_upload(request: Request) -> AsyncIterator[Upload | ServiceError]:
    """The upload (holding its parsing slot until the endpoint returns), or the error to show."""
    context = upload_context(request)
    try:
        upload = await context.__aenter__()
    except ServiceError as exc:
        yield exc
        return
    try:
        yield upload
    finally:
        await context.__aexit__(None, None, None)


@router.post("/datasets", response_class=HTMLResponse)
def upload_dataset(
    upload: Annotated[Upload | ServiceError, Depends(_form_upload, scope="function")], session: SessionDep,
    settings: SettingsDep,
) -> Response:
    """The upload form: the same validation and storage as ``POST /v1/datasets``."""
    if isinstance(upload, ServiceError):
        return _index(session, status_code=upload.status_code, errors=_problems(upload.detail))
    try:
        dataset, created = datasets.create(session, name=upload.name, content=upload.content, fmt=upload.fmt,
                                           limits=record_limits(settings),
                                           parse_process_bytes=settings.parse_process_bytes, filename=upload.filename)
    except ServiceError as exc:
        return _index(session, status_code=exc.status_code, errors=_problems(exc.detail))
    if not created:  # say which stored dataset it is, and that a new name was not applied
        fmt = datasets.upload_format(upload.content, upload.fmt)
        notice = datasets.duplicate_notice(dataset, upload.name, fmt)
        return _index(session, notice=notice[0].upper() + notice[1:] + ".", selected=str(dataset.id))
    return RedirectResponse(f"/?dataset={dataset.id}#replay-form", status_code=303)


async def _form_fields(request: Request) -> dict[str, list[str]]:
    form = await request.form(max_files=0, max_fields=100)
    try:
        out: dict[str, list[str]] = {}
        for key, value in form.multi_items():
            if isinstance(value, str):
                out.setdefault(key, []).append(value)
        return out
    finally:
        await form.close()


def _numbers(text: str) -> list[float]:
    return [float(x) for x in text.replace(";", ",").replace(" ", ",").split(",") if x.strip()]


@router.post("/replays", response_class=HTMLResponse)
def start_replay(
    fields: Annotated[dict[str, list[str]], Depends(_form_fields)], session: SessionDep, settings: SettingsDep
) -> Response:
    """The replay form: builds a ``ReplayCreate`` and submits it like ``POST /v1/replays``."""

    def one(key: str) -> str:
        return (fields.get(key) or [""])[0].strip()

    form = {"policies": fields.get("policies", []), "deltas": one("deltas"), "orders": one("orders"),
            "budgets": one("budgets"), "group": one("group"), "seed": one("seed"), "pairs": one("pairs")}
    body: dict[str, Any] = {"dataset_id": one("dataset_id"), "groups": [form["group"] or None]}
    if form["pairs"]:
        body["pairs"] = form["pairs"]
    errors: list[str] = []
    if form["policies"]:
        body["policies"] = form["policies"]
    for key, parse in (("deltas", _numbers), ("orders", int), ("seed", int)):
        if form[key]:
            try:
                body[key] = parse(form[key])
            except ValueError:
                errors.append(f"{key}: not a number: {form[key]!r}")
    if form["budgets"]:
        body["budgets"] = form["budgets"]
    try:
        create = ReplayCreate.model_validate(body)
    except ValidationError as exc:
        errors += [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    if errors:
        return _index(session, status_code=422, errors=errors, selected=one("dataset_id"), form=form)
    try:
        replay = replays.create(session, create, settings)
    except ServiceError as exc:
        return _index(session, status_code=exc.status_code, errors=_problems(exc.detail),
                      selected=one("dataset_id"), form=form)
    return RedirectResponse(f"/replays/{replay.id}", status_code=303)


# --------------------------------------------------------------------------- the report page


@router.get("/replays/compare", response_class=HTMLResponse)
def compare_page(
    session: SessionDep, ids: Annotated[list[str] | None, Query(max_length=view.MAX_COMPARED)] = None
) -> HTMLResponse:
    """Two or more finished replays of one dataset side by side (declared before
    ``/replays/{id}`` so that ``compare`` is not read as an id)."""
    wanted = list(dict.fromkeys(ids or []))

    def refuse(message: str) -> HTMLResponse:
        return render("error.html", 422, title="Cannot compare", message=message)

    if not 2 <= len(wanted) <= view.MAX_COMPARED:
        return refuse(f"Pick between 2 and {view.MAX_COMPARED} finished replays of one dataset (got {len(wanted)}).")
    loaded = []
    for raw in wanted:
        try:
            replay, report = reports.replay_with_report(session, uuid.UUID(raw))
        except (ValueError, NotFound):
            return refuse(f"There is no replay {raw[:40]}.")
        if report is None:
            return refuse(f"Replay {raw[:8]} is {replay.status}; only finished replays have budgets to compare.")
        loaded.append((replay, report))
    if len({r.dataset_id for r, _ in loaded}) > 1:
        return refuse("These replays are of different datasets; a comparison needs the same records.")
    dataset = datasets_repo.get(session, loaded[0][0].dataset_id)
    table = view.comparison([(str(r.id)[:8], rep) for r, rep in loaded])
    return render("compare.html", title="Compare replays", dataset=dataset, replays=[r for r, _ in loaded],
                  table=table, targets=loaded[0][1]["targets"])
@router.post("/replays/{replay_id}/cancel", response_class=HTMLResponse)
def cancel_replay(replay_id: str, session: SessionDep) -> Response:
    """The report page's cancel button: the same as ``DELETE /v1/replays/{id}``, then back to the
    page (a replay that finished meanwhile just shows its result)."""
    try:
        rid = uuid.UUID(replay_id)
        replays.cancel(session, rid)
    except (ValueError, NotFound):
        return _not_found(f"There is no replay {replay_id}.")
    except ServiceError:  # finished meanwhile (409): the page says how it ended
        pass
    return RedirectResponse(f"/replays/{rid}", status_code=303)


@router.get("/replays/{replay_id}", response_class=HTMLResponse)
def replay_page(
    replay_id: str,
    session: SessionDep,
    config: Annotated[int, Query(ge=0)] = 0,
    sort: str = "abs_delta",
    order: str = "asc",
    q: Annotated[str, Query(max_length=200)] = "",
    page: Annotated[int, Query(ge=1)] = 1,
) -> HTMLResponse:
    try:
        rid = uuid.UUID(replay_id)
        replay, report = reports.replay_with_report(session, rid)
    except (ValueError, NotFound):
        return _not_found(f"There is no replay {replay_id}.")
    state = replays.read(session, replay)
    dataset = datasets_repo.get(session, replay.dataset_id)
    context: dict[str, Any] = {
        "title": f"Replay {str(replay.id)[:8]}",
        "replay": state,
        "finished": replay.status in FINISHED,
        "dataset": dataset,
        "spec_items": view.spec_items(replay.spec),
        "report": report,
    }
    if report is not None:
        confs = report["configurations"]
        dims = view.varying_dimensions(report)
        config = min(config, max(len(confs) - 1, 0))
        rows = []
        for i, c in enumerate(confs):
            msb = view.budget_at(c, c["minimum_sufficient_budget"])
            rows.append({
                "index": i,
                "conf": c,
                "dims": [view.dim_value(c, d) for d in dims if d != "delta"],
                "msb_k": msb["k_mean"] if msb else None,
                "blocked": view.blocked_runs(c),
                "after": view.insufficient_after(c),
            })
        chosen = confs[config] if confs else None
        context.update(
            dims=[d for d in dims if d != "delta"],
            rows=rows,
            figures=[(name, spec) for name, spec in figures.FIGURES.items()],
            config=config,
            chosen=chosen,
            chosen_label=view.series_label(chosen, dims, with_delta=True) if chosen else "",
            pairs=view.pair_page(replay_pairs.table(session, replay, config), sort=sort, order=order, query=q,
                                 page=page) if chosen else None,
            sorts=view.PAIR_SORTS,
            q=q,
            budgets=report["spec"]["budgets"],
            labels=[view.series_label(c, dims, with_delta=True) for c in confs],
            class_figures=[(n, class_figures.TITLES[n], class_figures.CAPTIONS[n]) for n in class_figures.NAMES],
        )
        context["diagnostics"] = view.diagnostic_items(report, context["labels"])
        for row in rows:
            row["gaps"] = view.gap_cells(row["conf"])
    return render("replay.html", **context)


# --------------------------------------------------------------------------- leaderboard


@router.get("/datasets/{dataset_id}/leaderboard", response_class=HTMLResponse)
def leaderboard_page(
    dataset_id: str,
    session: SessionDep,
    settings: SettingsDep,
    level: float = 0.95,
    cluster: str = "",
    correction: str = "holm",
    ties: str = "leader",
) -> HTMLResponse:
    try:
        dataset = datasets.get(session, uuid.UUID(dataset_id))
    except (ValueError, NotFound):
        return _not_found(f"There is no dataset {dataset_id}.")
    records = datasets.load_records(session, dataset.id)
    params = {"level": level, "cluster": cluster, "correction": correction, "ties": ties}
    context: dict[str, Any] = {
        "title": f"Leaderboard · {dataset.name}",
        "dataset": dataset,
        "params": params,
        "group_columns": [c["name"] for c in dataset.summary.get("group_columns", [])],
        "corrections": board_stats.CORRECTIONS,
        "tie_rules": board_stats.TIE_RULES,
        "board": None,
        "error": None,
    }
    try:
        check_leaderboard(records.n_systems, settings)
    except Unprocessable as exc:
        context["error"] = "; ".join(d["message"] for d in exc.detail)
        return render("leaderboard.html", 422, **context)
    try:
        board = boards.leaderboard(records, dataset.id, level, cluster or None, correction, False, ties)
    except statbase.StatsInputError as exc:
        context["error"] = f"{exc.field}: {exc.message}"
        return render("leaderboard.html", 422, **context)
    context.update(board=board, **_leaderboard_rows(board))
    return render("leaderboard.html", **context)


def _leaderboard_rows(board: Any) -> dict[str, Any]:
    """Rows with each system's interval placed on a common 0–100 scale, its tie group and
    the test of its lead over the next rank."""
    lows = [r.stats.interval.low for r in board.rows]
    highs = [r.stats.interval.high for r in board.rows]
    lo, hi = (min(lows), max(highs)) if lows else (0.0, 1.0)
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        lo, hi = 0.0, 1.0
    pad = (hi - lo) * 0.04
    lo, hi = (max(lo - pad, 0.0) if lo >= 0 else lo - pad), hi + pad

    def x(v: float) -> float:
        return round(100 * (v - lo) / (hi - lo), 2) if math.isfinite(v) else 0.0

    group_of = {}
    for gi, g in enumerate(board.tie_groups):
        for rank in range(g.first_rank, g.last_rank + 1):
            group_of[rank] = (gi, g)
    lead = {c.rank_higher: c for c in board.adjacent}
    n = max(len(board.rows), 1)

    def at_rank(r: float) -> float:  # rank r's centre on a 0–100 scale of n equal slots
        return round(100 * (r - 0.5) / n, 2)

    kmax = max((len(r.stats.pass_k) for r in board.rows), default=1)
    rows = []
    for r in board.rows:
        s = r.stats
        gi, g = group_of.get(r.rank, (None, None))
        c = lead.get(r.rank)
        last = s.pass_k[-1] if kmax > 1 and len(s.pass_k) == kmax else None
        rows.append({
            "rank": r.rank, "s": s, "lead": c,
            "lead_text": None if c is None else view.signed(c.diff, 3),
            "lead_ci": None if c is None else f"[{view.signed(c.ci_low, 3)}, {view.signed(c.ci_high, 3)}]",
            "group_index": gi, "group": g, "group_start": g is not None and g.first_rank == r.rank,
            "x_low": x(s.interval.low), "x_high": x(s.interval.high), "x_mean": x(s.mean),
            "rank_low": r.rank_low, "rank_high": r.rank_high,
            "r_low": at_rank(r.rank_low), "r_high": at_rank(r.rank_high), "r_at": at_rank(r.rank),
            "letters": "".join(r.letters) if r.letters is not None else "–",
            "pass_k": last,
        })
    return {"rows": rows, "axis": (lo, hi), "kmax": kmax}

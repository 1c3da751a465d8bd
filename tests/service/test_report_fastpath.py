"""A finished report this process holds is answered before routing (``report_fastpath``) with
what the route answers: the same status, headers and bytes for JSON, CSV and a 304, only to
keys of its owner, and never for what the route alone should judge (a query string, the id
spelled otherwise, a report not cached)."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from service.auth import keys
from service.db import transaction
from service.main import create_app
from service.replays import router
from service.replays.report_cache import CACHE
from service.replays.report_fastpath import _target
from tests.service.conftest import SMALL_SPEC, make_settings, synth_csv, wait_for


def _answer(r) -> tuple:  # noqa: ANN001
    headers = sorted((k, v) for k, v in r.headers.items() if k not in ("date", "server"))
    return r.status_code, headers, r.content


def test_the_fast_path_answers_as_the_route(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    settings = make_settings(data_dir=tmp_path, auth="required", auth_cache_seconds=0)
    with TestClient(create_app(settings)) as c:
        with transaction(c.app.state.sessionmaker) as session:
            mine = {"Authorization": f"Bearer {keys.create(session, name='me', scopes='read,submit')[1]}"}
            theirs = {"Authorization": f"Bearer {keys.create(session, name='other', scopes='read')[1]}"}
        ds = c.post("/v1/datasets", files={"file": ("b.csv", synth_csv(seed=3), "text/csv")}, headers=mine).json()
        rid = c.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC}, headers=mine).json()["id"]
        c.headers.update(mine)
        assert wait_for(c, rid)["status"] == "succeeded"
        routed = []
        real = router._report_response

        async def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            routed.append(1)
            return await real(*args, **kwargs)

        monkeypatch.setattr(router, "_report_response", counting)
        for path in (f"/v1/replays/{rid}/report", f"/v1/replays/{rid}/report.csv"):
            CACHE.forget([uuid.UUID(rid)])
            by_route = c.get(path)
            etag = by_route.headers["etag"]
            CACHE.forget([uuid.UUID(rid)])
            not_modified_by_route = c.get(path, headers={"If-None-Match": f'W/{etag}, "other"'})
            assert routed == [1, 1]  # neither was cached
            c.get(path)  # cached now (if the 304 did not already)
            routed.clear()
            fast = c.get(path)
            not_modified_fast = c.get(path, headers={"If-None-Match": f'W/{etag}, "other"'})
            assert routed == []
            assert _answer(fast) == _answer(by_route) and by_route.status_code == 200
            assert _answer(not_modified_fast) == _answer(not_modified_by_route) and fast.headers["etag"] == etag
            assert not_modified_fast.status_code == 304
            # another owner's key is not served from the cache: the route says it does not exist
            other = c.get(path, headers=theirs)
            assert other.status_code == 404 and routed == [1]
            routed.clear()
            # a query string goes to the route
            assert c.get(path, params={"x": "1"}).content == by_route.content and routed == [1]
            routed.clear()
        assert c.get(f"/v1/replays/{rid}/report", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_only_canonical_report_paths_are_taken() -> None:
    rid = uuid.uuid4()
    assert _target(f"/v1/replays/{rid}/report")[:2] == (rid, "json")  # type: ignore[index]
    assert _target(f"/v1/replays/{rid}/report.csv")[:2] == (rid, "csv")  # type: ignore[index]
    for path in (f"/v1/replays/{str(rid).upper()}/report", f"/v1/replays/{rid.hex}/report",
                 f"/v1/replays/{rid}/report/", f"/v1/replays/{rid}/metrics", f"/v1/replays/{rid}",
                 f"/v2/replays/{rid}/report", "/v1/replays/not-a-uuid-but-36-characters-long!!/report"):
        assert _target(path) is None, path

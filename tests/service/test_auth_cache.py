"""The trust middleware's key cache: one database lookup per token at a time, however many
requests arrive while it runs; an entry near its end refreshed in the background while it is
served; an expired one never served; with ``auth_cache_seconds=0`` every request asks."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

from service.auth.keys import Principal
from service.auth.middleware import TrustMiddleware
from service.config import Settings

TOKEN = "suf_0123456789ab_secret"
ALICE = Principal(key_id=uuid.uuid4(), name="alice", owner="alice", scopes=frozenset({"read"}))


def _middleware(ttl: float, answers: list[Principal | None], release: threading.Event | None = None):
    mw = TrustMiddleware(lambda *a: None, fastapi_app=None, settings=Settings(auth="required",  # type: ignore[arg-type]
                                                                                 auth_cache_seconds=ttl))
    calls = []

    def lookup(token: str) -> Principal | None:
        calls.append(token)
        if release is not None:
            assert release.wait(30)
        return answers[min(len(calls), len(answers)) - 1]

    mw._lookup = lookup  # type: ignore[method-assign]
    return mw, calls


def test_requests_that_miss_together_share_one_lookup() -> None:
    release = threading.Event()
    mw, calls = _middleware(5.0, [ALICE], release)

    async def main() -> list[Principal | None]:
        waiting = [asyncio.ensure_future(mw._verify(TOKEN)) for _ in range(8)]
        await asyncio.sleep(0)  # every request has reached the lookup (they do not suspend before it)
        release.set()
        return await asyncio.gather(*waiting)

    assert asyncio.run(main()) == [ALICE] * 8
    assert len(calls) == 1


def test_without_a_cache_every_request_asks() -> None:
    mw, calls = _middleware(0.0, [ALICE])

    async def main() -> list[Principal | None]:
        return await asyncio.gather(*(mw._verify(TOKEN) for _ in range(5)))

    assert asyncio.run(main()) == [ALICE] * 5
    assert len(calls) == 5


def test_an_entry_near_its_end_is_served_and_refreshed() -> None:
    mw, calls = _middleware(10.0, [ALICE, None])  # the key is revoked after the first lookup

    async def main() -> tuple[Principal | None, ...]:
        first = await mw._verify(TOKEN)
        [digest] = mw._verified.keys()
        mw._verified.put(digest, (time.monotonic() + 1.0, ALICE))  # in the last fifth of its 10 s
        served = await mw._verify(TOKEN)  # still trusted: served from the cache, and a refresh starts
        assert len(calls) == 1 and len(mw._inflight) == 1
        await asyncio.gather(*mw._inflight.values())
        after = await mw._verify(TOKEN)  # the refresh said revoked
        return first, served, after

    assert asyncio.run(main()) == (ALICE, ALICE, None)
    assert len(calls) == 2


def test_an_expired_entry_is_never_served() -> None:
    mw, calls = _middleware(10.0, [ALICE, None])

    async def main() -> tuple[Principal | None, Principal | None]:
        first = await mw._verify(TOKEN)
        [digest] = mw._verified.keys()
        mw._verified.put(digest, (time.monotonic() - 0.001, ALICE))
        return first, await mw._verify(TOKEN)

    assert asyncio.run(main()) == (ALICE, None)
    assert len(calls) == 2

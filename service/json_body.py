"""JSON request bodies whose strings are Unicode text, on every route (``engine/jsontext.py``
says why: a session on a task named ``"t\\ud800"`` was a 500). ``StrictJSONRoute`` decodes
the bodies FastAPI would decode with ``json.loads`` by ``loads``, which refuses such a string
as a 422 that says which; pydantic's parser, which the decision routes use, refuses it too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from service.engine.jsontext import may_hold_non_text, non_text


def loads(body: bytes | str) -> Any:
    """``json.loads``, but a string (key or value) that is not text (``jsontext``) is a
    ``json.JSONDecodeError`` that names it."""
    doc = json.loads(body)
    if may_hold_non_text(body) and (problem := non_text(doc)) is not None:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        raise json.JSONDecodeError(problem, text, 0)
    return doc


class _StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is decoded by ``loads``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict


__all__ = ["StrictJSONRoute", "loads"]

"""``POST /v1/decisions`` answered before FastAPI's routing, for the case harnesses send
after every task: the universe inline, a body that parses, a decision that succeeds.

Why: that request is pure CPU work of about 0.3 ms, and FastAPI's layers around it
(exception middleware, routing through the included routers, the request object, the
dependency solver, the response class) added another 0.07-0.13 ms in process, a sixth to
a quarter of the whole. A dataset decision is answered here too once its universe and
calibration are cached in this process. Everything else goes on to the FastAPI route with the
body it was sent: a dataset look-up not cached yet (the database, in a thread), a body that
does not parse or does not decide (the route raises the same error again and the app's
handlers shape the 4xx), or a server error.

Installed inside the trust middleware, so authentication, scopes, the rate limit, the
body cap and ``nosniff`` apply as to every route. A test checks the bytes equal the
route's own answer, for successes and errors.
"""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import limits
from service.config import Settings
from service.decisions import service
from service.decisions.schemas import DecisionCreate

PATH = "/v1/decisions"


class DecisionFastPath:
    def __init__(self, app: ASGIApp, calibration_ttl: float = 0.0):
        self.app = app
        self.calibration_ttl = calibration_ttl

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        if messages[-1]["type"] == "http.request":
            state = scope["app"].state
            answer = _try_decide(b"".join(m.get("body", b"") for m in messages), self.calibration_ttl,
                                 state.settings, getattr(state, "sessionmaker", None))
            if answer is not None:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-length", str(len(answer)).encode("latin-1")),
                                        (b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": answer})
                return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def _try_decide(raw: bytes, calibration_ttl: float, settings: Settings,
                factory: sessionmaker[Session] | None = None) -> bytes | None:
    """The answer for a small inline universe, or for a dataset whose universe and calibration
    are cached in this process; ``None`` to leave the request to the route (which decides a
    large one off the event loop: see ``limits.check_decision``). No session is opened here:
    ``factory`` only lets calibration rows near their expiry be read again in the background."""
    if len(raw) > settings.decision_inline_bytes:
        return None
    try:
        body = DecisionCreate.model_validate_json(raw)
        if body.forecast:  # a forecast simulates: not on the event loop
            return None
        if limits.check_decision(body, settings) > settings.decision_inline_work:
            return None
        return service.decision_json(factory, body, calibration_ttl=calibration_ttl, cached_only=True,
                                     settings=settings)
    except Exception:  # the route runs it again and its handlers say what is wrong (or 500)
        return None

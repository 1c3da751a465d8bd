"""Which scope each request needs, from its method and path. One table for the whole
service, independent of how the routers are mounted; a test walks every route of the OpenAPI
document and the pages and checks the scope it resolves to, so a new route cannot slip through.
"""

from __future__ import annotations

SCOPES = ("read", "submit", "decide", "admin")
"""``read``: datasets, reports, leaderboards, figures, pages, calculators; ``submit``: uploads
(renaming and deleting datasets) and replays (and cancelling them); ``decide``: decisions,
live sessions and placements; ``admin``: keys."""

PUBLIC = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
PUBLIC_PREFIXES = ("/static/", "/docs/assets/")
"""Probes, the API contract and the pages' own CSS/JS: no data behind them."""

SUBMIT = frozenset({
    ("POST", "/v1/datasets"),
    ("POST", "/v1/replays"),
    ("POST", "/datasets"),  # the pages' upload form
    ("POST", "/replays"),  # the pages' replay form
})
SUBMIT_PAGE_SUFFIX = "/cancel"
"""``POST /replays/{id}/cancel``: the report page's cancel button."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def required_scope(method: str, path: str) -> str | None:
    """The scope ``method`` on ``path`` needs; ``None`` = public. Writes that no rule names
    need ``admin`` (fail closed until they are mapped here)."""
    if path in PUBLIC or path.startswith(PUBLIC_PREFIXES):
        return None
    if path == "/v1/keys" or path.startswith("/v1/keys/"):
        return "admin"
    if path.startswith(("/v1/decisions", "/v1/sessions", "/v1/placements")):
        return "decide"
    if (method, path) in SUBMIT or (method == "DELETE" and path.startswith("/v1/replays/") and path.count("/") == 3):
        return "submit"
    if method == "POST" and path.startswith("/replays/") and path.endswith(SUBMIT_PAGE_SUFFIX) and path.count("/") == 3:
        return "submit"
    if method in ("PATCH", "DELETE") and path.startswith("/v1/datasets/") and path.count("/") == 3:
        return "submit"  # rename / delete a dataset (a replay of another owner blocks the delete)
    if method in SAFE_METHODS or path.startswith("/v1/stats/"):  # the calculators change nothing
        return "read"
    return "admin"


def parse_scopes(text: str | list[str]) -> list[str]:
    """``"read,submit"`` → ``["read", "submit"]`` (validated, canonical order)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    wanted = {s.strip().lower() for s in items if s.strip()}
    unknown = sorted(wanted - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    if not wanted:
        raise ValueError(f"give at least one scope of {', '.join(SCOPES)}")
    return [s for s in SCOPES if s in wanted]

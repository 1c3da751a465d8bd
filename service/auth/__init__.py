"""Trust: API keys with scopes, per-key limits, owner scoping, CORS (issue 7).

Everything is wired centrally (``install_trust`` adds one ASGI middleware and, when
configured, CORS; ``bind_owner_scope`` makes a sessionmaker filter owned rows), so the
domain routers need no edits: the scope a route needs is looked up in ``scopes.py``.
"""

"""Issue, list, revoke and verify API keys. Functions only flush; the caller commits.

A token is ``suf_<prefix>_<secret>``: ``prefix`` (12 hex digits) is stored in clear to find
the row, ``secret`` (256 random bits) never is; the row keeps ``sha256(token)`` and a
presented token is compared to it in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service.auth.models import ApiKey
from service.auth.scopes import parse_scopes
from service.db import utcnow

TOKEN_PREFIX = "suf_"


@dataclass(frozen=True)
class Principal:
    """Who a request acts for."""

    key_id: uuid.UUID
    name: str
    owner: str
    scopes: frozenset[str]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _split(token: str) -> str | None:
    """The prefix of a well-formed token, else ``None``."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    prefix, sep, secret = token[len(TOKEN_PREFIX):].partition("_")
    if not sep or len(prefix) != 12 or not secret or len(token) > 200:
        return None
    return prefix


def prefix_of(token: str) -> str | None:
    """The public prefix of a well-formed token (it names a key, it is not a secret)."""
    return _split(token)


def create(session: Session, *, name: str, scopes: str | list[str], owner: str | None = None) -> tuple[ApiKey, str]:
    """A new key and its token (the only time the token exists in clear)."""
    name = name.strip()
    if not name or len(name) > 200:
        raise ValueError("a key name is 1 to 200 characters")
    owner = (owner or name).strip()
    if not owner or len(owner) > 200:
        raise ValueError("an owner is 1 to 200 characters")
    prefix = secrets.token_hex(6)
    token = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey(id=uuid.uuid4(), prefix=prefix, key_hash=hash_token(token), name=name, owner=owner,
                 scopes=parse_scopes(scopes))
    session.add(key)
    session.flush()
    return key, token


def all_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.name)))


def find(session: Session, ref: str) -> list[ApiKey]:
    """Keys matching ``ref``: an id, a prefix (or a whole token's prefix), or a name."""
    conditions = [ApiKey.name == ref, ApiKey.prefix == ref]
    split = _split(ref)
    if split:
        conditions.append(ApiKey.prefix == split)
    try:
        conditions.append(ApiKey.id == uuid.UUID(ref))
    except ValueError:
        pass
    return list(session.scalars(select(ApiKey).where(or_(*conditions))))


def revoke(session: Session, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
    return key


def verify(session: Session, token: str) -> Principal | None:
    """The principal of a valid, unrevoked token; ``None`` otherwise."""
    prefix = _split(token)
    if prefix is None:
        return None
    key = session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
    if key is None or not hmac.compare_digest(key.key_hash, hash_token(token)) or key.revoked_at is not None:
        return None
    return Principal(key_id=key.id, name=key.name, owner=key.owner, scopes=frozenset(key.scopes))

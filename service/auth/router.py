"""``/v1/keys`` (scope ``admin``): the HTTP twin of ``sufficiency keys``."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, status

from service.auth import keys
from service.auth.models import ApiKey
from service.auth.schemas import KeyCreate, KeyCreated, KeyRead
from service.deps import SessionDep, SettingsDep
from service.errors import NotFound, ServiceError, Unprocessable, responses
from service.json_body import StrictJSONRoute

router = APIRouter(prefix="/v1/keys", tags=["keys"], route_class=StrictJSONRoute)


class Forbidden(ServiceError):
    status_code = 403
    code = "forbidden"


def _auth_on(settings) -> None:  # noqa: ANN001
    if settings.auth != "required":
        raise Forbidden("key management over HTTP needs SUFFICIENCY_AUTH=required; use `sufficiency keys`")


@router.get("", response_model=list[KeyRead], responses=responses(Forbidden), summary="List API keys")
def list_keys(session: SessionDep, settings: SettingsDep) -> list[ApiKey]:
    _auth_on(settings)
    return keys.all_keys(session)


@router.post("", response_model=KeyCreated, status_code=status.HTTP_201_CREATED,
             responses=responses(Forbidden, Unprocessable),
             summary="Create an API key (the token is in this response only)")
def create_key(body: KeyCreate, session: SessionDep, settings: SettingsDep) -> KeyCreated:
    _auth_on(settings)
    try:
        key, token = keys.create(session, name=body.name, scopes=list(body.scopes), owner=body.owner)
    except ValueError as exc:
        raise Unprocessable([{"field": "body", "message": str(exc)}]) from None
    return KeyCreated(**KeyRead.model_validate(key).model_dump(), token=token)


@router.delete("/{key_id}", response_model=KeyRead, responses=responses(NotFound, Forbidden),
               summary="Revoke an API key")
def revoke_key(key_id: uuid.UUID, session: SessionDep, settings: SettingsDep) -> ApiKey:
    _auth_on(settings)
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound(f"key {key_id} does not exist")
    return keys.revoke(session, key)

"""Keep the OpenAPI document honest about what the trust layer and the error handler answer.

- FastAPI documents request-validation errors as ``{"detail": [{"loc", "msg", "type"}]}``;
  this service answers ``{"error": "invalid_input", "detail": [{"field", "message"}]}``.
- Every operation but the probes may answer 401 / 403 (auth required) and 429 (rate limit),
  every operation with a body 400 (unparseable) and 413 (body cap), every one that reads the database 503; the
  bearer key is declared as a security scheme (optional: auth is off by default).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from service.auth.scopes import required_scope

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
BODY_METHODS = ("post", "put", "patch")


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def amend(doc: dict[str, Any]) -> dict[str, Any]:
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    if "HTTPValidationError" in schemas:
        schemas["HTTPValidationError"] = {
            "title": "HTTPValidationError",
            "type": "object",
            "required": ["error", "detail"],
            "properties": {
                "error": {"type": "string", "title": "Error"},
                "detail": {"type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}},
            },
        }
        schemas["ValidationError"] = {
            "title": "ValidationError",
            "type": "object",
            "required": ["field", "message"],
            "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
        }
    doc["components"].setdefault("securitySchemes", {})["apiKey"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from `sufficiency keys create` (needed when SUFFICIENCY_AUTH=required).",
    }
    for path, operations in doc.get("paths", {}).items():
        for method, op in operations.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            scope = required_scope(method.upper(), path.replace("{", "x").replace("}", ""))
            if scope is None:
                op["security"] = []
                continue
            op["security"] = [{"apiKey": []}, {}]
            responses.setdefault("401", _error("No key, or an invalid or revoked key (when auth is required)"))
            responses.setdefault("403", _error(f"The key lacks the '{scope}' scope"))
            responses.setdefault("429", _error("Rate limit of the key exceeded (see Retry-After)"))
            responses.setdefault("503", _error("The database is unavailable (see Retry-After)"))
            if method in BODY_METHODS:
                responses.setdefault("400", _error("The body cannot be parsed (for instance, not UTF-8)"))
                responses.setdefault("413", _error("The request body is over the limit"))
    return doc


def install_contract(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = amend(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

"""The committed OpenAPI document matches the app (regenerate: ``python -m service.openapi_doc``)."""

from __future__ import annotations

import difflib
import json

from service.openapi_doc import DOC_PATH, render


def test_openapi_document_is_current() -> None:
    fresh = render()
    committed = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else ""
    if fresh != committed:
        diff = "".join(
            list(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True), "committed", "app"))[:60]
        )
        raise AssertionError(f"openapi/openapi.json is stale; run `python -m service.openapi_doc`\n{diff}")


def test_openapi_declares_errors_and_upload_body() -> None:
    doc = json.loads(render())
    upload = doc["paths"]["/v1/datasets"]["post"]
    assert set(upload["requestBody"]["content"]) == {"multipart/form-data", "application/json"}
    assert {"413", "415", "422"} <= set(upload["responses"])
    report = doc["paths"]["/v1/replays/{replay_id}/report"]["get"]
    assert {"200", "304", "404", "409"} <= set(report["responses"])
    assert doc["components"]["schemas"]["ErrorBody"]["required"] == ["error"]

"""Property-based fuzzing of every operation of the OpenAPI document (schemathesis, built on
hypothesis), on SQLite and Postgres, against the app under uvicorn with auth required and a
key holding every scope: no response is a 5xx, and every response matches its documented
status codes, content type and schema. The examples per operation are bounded so the run
stays well under a minute. A request that does not answer within ``HANG`` seconds fails (a
guard against hangs, not a speed check: the work of known expensive inputs is counted in
test_limits and test_bounded).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.auth import keys
from service.db import transaction
from service.main import create_app
from tests.service import procs
from tests.service.conftest import make_settings, synth_csv

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
RANDOM = bool(os.environ.get("SUFFICIENCY_FUZZ_RANDOM"))  # explore beyond the fixed examples
EXAMPLES = int(os.environ.get("SUFFICIENCY_FUZZ_EXAMPLES", "20"))
HANG = 60.0  # seconds without an answer: the request hangs


@pytest.fixture
def fuzz_target(backend: dict[str, object]) -> Iterator[dict[str, object]]:
    app = create_app(make_settings(**backend, auth="required", rate_limit_per_second=0, max_replay_cases=200_000))
    port = procs.free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with transaction(app.state.sessionmaker) as session:
        token = keys.create(session, name="fuzz", scopes="read,submit,decide,admin")[1]
    headers = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{port}"
    seeded = httpx.post(f"{base}/v1/datasets", files={"file": ("b.csv", synth_csv(n_tasks=20), "text/csv")},
                        headers=headers)
    assert seeded.status_code == 201  # some generated ids and names will hit a real dataset
    yield {"schema": schemathesis.openapi.from_dict(app.openapi()), "base": base, "headers": headers}
    server.should_exit = True
    thread.join(timeout=30)


def test_every_operation_survives_fuzzing(fuzz_target: dict[str, object]) -> None:
    schema = fuzz_target["schema"]
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 25
    failures: list[str] = []
    sent = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            calls = [0]
            try:
                _fuzz(operation, mode, fuzz_target, calls)
            except Unsatisfiable:  # no invalid input exists (an operation without parameters)
                pass
            except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failures, then report
                failures.append(f"{operation.label} [{mode.value}]: {type(exc).__name__}: {str(exc)[:1500]}")
            sent += calls[0]
    print(f"fuzzed {len(operations)} operations with {sent} requests")
    assert not failures, "\n\n".join(failures)


def _fuzz(operation, mode: GenerationMode, target: dict[str, object], calls: list[int]) -> None:  # noqa: ANN001
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:  # noqa: ANN001
        calls[0] += 1
        try:
            response = case.call(base_url=target["base"], headers=target["headers"], timeout=HANG)
        except Exception as exc:  # a timeout, or the connection dropped: say which input
            raise AssertionError(f"{case.operation.label}: {type(exc).__name__}: {case.as_curl_command()}") from exc
        case.validate_response(response, checks=CHECKS)

    run()

"""Schemathesis over the served OpenAPI schema: whatever a caller sends, the service answers
without a 5xx, with a status the schema declares and a body that matches the schema of that
status (the tool's result model, or the error body) — the real app in-process, a real
Workbench without an LLM."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.api.app import create_app  # noqa: E402
from workbench.config import load_settings  # noqa: E402
from workbench.facade import Workbench  # noqa: E402
from workbench.fakes.embedder import HashEmbedder  # noqa: E402

pytestmark = pytest.mark.slow

_settings = load_settings(
    {"SVC_KNOWLEDGE_DB_PATH": ":memory:", "SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE": "0"}, env_file=None
)
_workbench = Workbench.open(_settings, embedder=HashEmbedder(), chat=None)
_app = create_app(_workbench, _settings, allowed_hosts=("testserver",))  # the ASGI client's name
schema = schemathesis.openapi.from_asgi("/schema/openapi.json", _app)


@pytest.fixture(scope="module", autouse=True)
def _close_workbench():
    yield
    _workbench.close()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_input_gives_a_server_error(case):
    response = case.call()
    assert response.status_code < 500, (case.path, case.body, response.text)
    case.validate_response(
        response,
        checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
    )
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["type"] and error["message"] and "Traceback" not in error["message"]

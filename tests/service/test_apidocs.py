"""The API docs pages load nothing from the internet: every script, style and icon the page
names is served by the server itself (an offline browser shows the docs)."""

from __future__ import annotations

import re

import pytest
from litestar.testing import TestClient

from service.api.app import create_app
from serving.apidocs import ASSET_FILES, ASSETS_PATH
from tests.service.svc_helpers import BASE, make_settings
from workbench.facade import Workbench
from workbench.metrics import Metrics

MEDIA = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


def assert_docs_are_served_offline(client) -> None:
    """Shared with the voice server's tests."""
    for page in ("/schema", "/schema/swagger"):
        response = client.get(page)
        assert response.status_code == 200, page
        html = response.text
        # no absolute or protocol-relative URL anywhere in the page
        assert re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[/\w.@%-]*", html) == [], page
        linked = re.findall(r"(?:src|href)=[\"']([^\"']+)", html)
        assert sorted(link.rsplit("/", 1)[-1] for link in linked) == sorted(ASSET_FILES)
        for link in linked:
            assert link.startswith(f"{ASSETS_PATH}/"), link
            asset = client.get(link)
            assert asset.status_code == 200, link
            suffix = link[link.rindex(".") :]
            assert MEDIA[suffix] in asset.headers["content-type"], link
            assert len(asset.content) > 500, link
        assert "SwaggerUIBundle(" in html and '"openapi"' in html  # the spec is in the page
    assert "javascript" in client.get(f"{ASSETS_PATH}/swagger-ui-bundle.js").headers["content-type"]
    # only the files the page loads: nothing else of the package's folder, no way out of it
    for other in ("index.html", "swagger-editor.js", "..%2F__init__.py", "../__init__.py"):
        assert client.get(f"{ASSETS_PATH}/{other}").status_code == 404, other


@pytest.fixture
def client(fake_llm, hash_embedder):
    workbench = Workbench.open(make_settings(fake_llm), embedder=hash_embedder, metrics=Metrics())
    with TestClient(create_app(workbench, workbench.settings), base_url=BASE) as test_client:
        yield test_client
    workbench.close()


def test_the_api_docs_pages_need_no_internet(client):
    assert_docs_are_served_offline(client)


def test_the_openapi_document_is_still_served(client):
    spec = client.get("/schema/openapi.json").json()
    assert spec["openapi"].startswith("3.1") and "/tools/add_memory" in spec["paths"]

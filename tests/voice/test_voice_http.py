"""HTTP contract of the voice server, driven in-process with Litestar's test client."""

from __future__ import annotations

import json
import struct

import pytest
from litestar.testing import TestClient

from voice.engine import KokoroEngine
from voice.notifier import WARM_TEXTS
from voice.ratelimit import RateLimiter
from voice.server import create_app


@pytest.fixture
def client(settings, tone, sink):
    app = create_app(settings, engine=tone, sink=sink)
    with TestClient(app) as test_client:
        test_client.service = app.state["service"]
        yield test_client


def spoken(tone) -> list[tuple[str, str, float]]:
    """The engine calls of notifications (not the one warming the engine at start)."""
    return [call for call in tone.calls if call[0] not in WARM_TEXTS]


def is_error(response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == "error" and fragment in body["message"], body


def test_notify_accepted(client, sink, tone):
    body = {"message": "Build finished. All green.", "voice_id": "12",
            "voice_settings": {"speed": 1.5}, "title": "CI", "volume": 0.7}  # fmt: skip
    r = client.post("/notify", json=body)
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "success" and "am_michael" in body["message"] and body["id"]
    assert client.service.notifier.wait_idle(5)
    assert [(c[1], c[2]) for c in spoken(tone)] == [("am_michael", 1.5)] * 2
    assert client.service.notifier.last().id == body["id"]
    assert len(sink.recordings) == 1


def test_notify_defaults_to_voice_1(client, tone):
    assert client.post("/notify", json={"message": "Hi."}).status_code == 202
    assert client.service.notifier.wait_idle(5)
    assert spoken(tone)[0][1] == "af_heart"


def test_notify_ids_are_unique(client):
    ids = {client.post("/notify", json={"message": f"Hi {i}."}).json()["id"] for i in range(3)}
    assert len(ids) == 3


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty"),
        (b"{not json", "not valid JSON"),
        (b'"just a string"', "must be a JSON object"),
        (b"{}", "'message' is required"),
        (b'{"message": ""}', "must not be empty"),
        (b'{"message": ["a"]}', "must be a string"),
        (json.dumps({"message": "x" * 5001}).encode(), "limit is 5000"),
        (b'{"message": "x", "voice_id": "42"}', "'1' to '41'"),
        (b'{"message": "x", "voice_id": "0"}', "'1' to '41'"),
        (b'{"message": "x", "voice_settings": {"speed": 0.1}}', "0.5 to 2.0"),
        (b'{"message": "x", "voice_settings": "fast"}', "must be an object"),
        (b'{"message": "x", "volume": -1}', "'volume'"),
        (b'{"message": "x", "title": ["t"]}', "'title'"),
    ],
)
def test_notify_bad_requests_are_400(client, content, fragment):
    r = client.post("/notify", content=content, headers={"Content-Type": "application/json"})
    is_error(r, 400, fragment)


def test_queue_full_is_429(settings, tone, gate_sink):
    gate = gate_sink
    app = create_app(settings.model_copy(update={"queue_size": 1}), engine=tone, sink=gate)
    with TestClient(app) as client:
        assert client.post("/notify", json={"message": "first"}).status_code == 202
        assert gate.entered.wait(5)  # the worker is busy playing the first
        assert client.post("/notify", json={"message": "second"}).status_code == 202  # waits
        r = client.post("/notify", json={"message": "third"})
        is_error(r, 429, "queue is full")
        assert r.headers["retry-after"] == "1"
        assert client.get("/health").json()["queue_depth"] == 1
        gate.gate.set()


def test_client_over_its_rate_is_429(settings, tone, sink):
    app = create_app(settings, engine=tone, sink=sink, limiter=RateLimiter(per_minute=1, burst=2))
    with TestClient(app) as client:
        statuses = [client.post("/notify", json={"message": f"x{i}"}).status_code for i in range(2)]
        assert statuses == [202, 202]
        r = client.post("/notify", json={"message": "x2"})
        is_error(r, 429, "too many requests")
        assert 55 <= int(r.headers["retry-after"]) <= 60


def test_missing_backend_is_503_and_reported(settings, sink, tmp_path):
    engine = KokoroEngine(tmp_path / "empty")
    app = create_app(settings, engine=engine, sink=sink)
    with TestClient(app) as client:
        r = client.post("/notify", json={"message": "Hello"})
        is_error(r, 503, "voice backend missing")
        assert "fetch_voice_assets.sh" in r.json()["message"]
        health = client.get("/health").json()
        assert health["status"] == "degraded" and health["backend_available"] is False
        assert "voice backend missing" in health["message"] and health["model_loaded"] is False
        is_error(
            client.post("/v1/audio/speech", json={"input": "Hi"}), 503, "voice backend missing"
        )


def test_oversized_body_is_413(client):
    r = client.post(
        "/notify",
        content=b'{"message": "' + b"x" * 300_000 + b'"}',
        headers={"Content-Type": "application/json"},
    )
    is_error(r, 413, "")


def test_unknown_route_and_wrong_method_keep_the_error_shape(client):
    is_error(client.get("/nope"), 404, "Not Found")
    is_error(client.get("/notify"), 405, "Method Not Allowed")


def test_health(client):
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["engine"] == "tone"
    assert body["model_loaded"] is True and body["audio_output_available"] is True
    assert body["default_voice"] == {"id": "1", "name": "af_heart", "language": "en-us"}
    assert len(body["voices"]) == 41 and body["voices"][20] == {
        "id": "21",
        "name": "bf_emma",
        "language": "en-gb",
    }
    assert body["queue_depth"] == 0 and body["pronunciations"]["rules"] == 0


def test_health_reports_no_audio(settings, tone):
    app = create_app(settings.model_copy(update={"audio_enabled": False}), engine=tone)
    with TestClient(app) as client:
        body = client.get("/health").json()
        assert body["audio_output_available"] is False and body["status"] == "degraded"
        assert client.post("/notify", json={"message": "Dropped."}).status_code == 202
        assert app.state["service"].notifier.wait_idle(5)
        assert app.state["service"].notifier.last().result == "dropped"


def test_health_reports_a_bad_pronunciation_file(settings, client):
    settings.pronunciations.write_text("{oops")
    body = client.get("/health").json()
    assert "not valid JSON" in body["pronunciations"]["error"]
    assert client.post("/notify", json={"message": "still works"}).status_code == 202


def test_pronunciations_are_applied(settings, client, tone):
    settings.pronunciations.write_text(json.dumps({"kubectl": "cube control"}))
    assert client.post("/notify", json={"message": "Run kubectl now."}).status_code == 202
    assert client.service.notifier.wait_idle(5)
    assert spoken(tone)[0][0] == "Run cube control now."


def test_speech_streams_wav(client, tone):
    r = client.post(
        "/v1/audio/speech", json={"input": "One. Two.", "voice": "af_sky", "speed": 2.0}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert r.content[:4] == b"RIFF" and struct.unpack("<I", r.content[24:28]) == (24000,)
    pcm = r.content[44:]
    expected = (int(4 * 0.01 / 2 * 24000) * 2 + int(0.2 * 24000)) * 2
    assert len(pcm) == expected
    assert [(c[1], c[2]) for c in spoken(tone)] == [("af_sky", 2.0)] * 2


def test_speech_streams_the_same_plan_as_notify(client, tone):
    text = "Hello world, the nightly build finished. Bye."
    r = client.post("/v1/audio/speech", json={"input": text, "response_format": "pcm"})
    assert r.status_code == 200
    texts = ["Hello world,", "the nightly build finished.", "Bye."]
    assert [c[0] for c in spoken(tone)] == texts
    samples = sum(int(len(t) * 0.01 * 24000) for t in texts) + int(0.2 * 24000)  # after "finished."
    assert len(r.content) == samples * 2


def test_speech_streams_raw_pcm(client):
    r = client.post("/v1/audio/speech", json={"input": "Hello.", "response_format": "pcm"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/pcm"
    assert r.headers["x-sample-rate"] == "24000" and len(r.content) == int(6 * 0.01 * 24000) * 2


def test_speech_bad_request(client):
    is_error(
        client.post("/v1/audio/speech", json={"input": "x", "voice": "nobody"}), 400, "'1' to '41'"
    )


def test_openapi_schema_lists_the_routes(client):
    schema = client.get("/schema/openapi.json").json()
    assert {"/notify", "/health", "/v1/audio/speech"} <= set(schema["paths"])
    assert schema["info"]["title"] == "Voice notification server"


def test_the_api_docs_pages_need_no_internet(client):
    from tests.service.test_apidocs import assert_docs_are_served_offline

    assert_docs_are_served_offline(client)


# --- hardening: the browser, malformed text, exposure -----------------------------------------
def test_a_cross_site_or_non_json_post_is_refused(client):
    body = b'{"message": "You have been hacked", "voice_id": "1"}'
    is_error(
        client.post(
            "/notify",
            content=body,
            headers={"Content-Type": "text/plain", "Origin": "https://evil.example"},
        ),
        403,
        "cross-origin",
    )
    is_error(
        client.post("/notify", content=body, headers={"Content-Type": "text/plain"}),
        415,
        "application/json",
    )
    is_error(
        client.post(
            "/notify",
            content=body,
            headers={"Content-Type": "application/json", "Host": "evil.example"},
        ),
        421,
        "host name",
    )
    assert client.service.notifier.depth == 0 and not client.service.notifier.outcomes


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b'{"message": "\\ud800", "voice_id": "1"}', "surrogate"),
        (b'{"message": ' + b"[" * 1000 + b"]" * 1000 + b"}", "deeper than"),
        (b'{"message": "\xff"}', "not valid JSON"),
    ],
)
def test_text_that_cannot_be_spoken_is_a_400_not_an_accepted_failure(client, raw, fragment):
    response = client.post("/notify", content=raw, headers={"Content-Type": "application/json"})
    is_error(response, 400, fragment)


def test_with_a_token_posting_needs_it(settings, tone, sink):
    token = "voice-token-0123456789"
    app = create_app(settings.model_copy(update={"token": token}), engine=tone, sink=sink)
    with TestClient(app) as client:
        is_error(client.post("/notify", json={"message": "hi"}), 401, "VOICE_TOKEN")
        ok = client.post(
            "/notify", json={"message": "hi"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert ok.status_code == 202
        assert client.get("/health").status_code == 200


@pytest.mark.parametrize("token", [None, "short"])
def test_a_non_loopback_bind_without_a_strong_token_is_refused(token):
    from voice.server import check_exposure
    from voice.settings import Settings

    with pytest.raises(SystemExit, match="VOICE_TOKEN"):
        check_exposure(Settings(host="0.0.0.0", token=token))
    check_exposure(Settings(host="0.0.0.0", token="x" * 16))
    check_exposure(Settings(host="127.0.0.1"))

"""The HTTP server: ``create_app`` (Litestar) and the ``voice-server`` command.

Routes: ``POST /notify`` (queue a spoken notification, 202), ``GET /health``, and
``POST /v1/audio/speech`` (OpenAI-style; streams WAV or raw 16-bit PCM as it is synthesized).
Errors are JSON ``{"status": "error", "message": ...}``; ``status_for`` is the one mapping from
the error tree to HTTP status codes.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.response import Stream

from serving import apidocs
from serving.addresses import is_loopback
from serving.asgi import Send, for_litestar
from serving.middleware import BearerAuthMiddleware, Exposure, ExposureMiddleware
from serving.version import package_version
from voice.assets import VOICES_FILE
from voice.audio import AudioSink, DropSink, SoundDeviceSink
from voice.engine import Engine, KokoroEngine
from voice.errors import BackendMissing, QueueFull, RateLimited, RequestInvalid, VoiceError
from voice.metrics import CONTENT_TYPE
from voice.payloads import parse_notify, parse_speech
from voice.pronunciation import RulesFile
from voice.ratelimit import RateLimiter
from voice.service import VoiceService
from voice.settings import Settings, settings_from_env
from voice.voices import resolve_voice

log = logging.getLogger("voice.server")

MAX_BODY_BYTES = 256 * 1024  # far above the longest message; larger bodies answer 413

_STATUS: dict[type[VoiceError], int] = {
    RequestInvalid: 400,
    QueueFull: 429,
    RateLimited: 429,
    BackendMissing: 503,
}


def status_for(exc: VoiceError) -> int:
    """HTTP status of an error of the tree (500 for anything not meant for the client)."""
    return next((code for cls, code in _STATUS.items() if isinstance(exc, cls)), 500)


def _error(message: str, status: int, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response({"status": "error", "message": message}, status_code=status, headers=headers)


def _voice_error(_: Request[Any, Any, Any], exc: VoiceError) -> Response[Any]:
    status = status_for(exc)
    if status == 500:
        log.exception("unexpected voice error", exc_info=exc)
    wait = math.ceil(getattr(exc, "retry_after", 1.0))
    headers = {"Retry-After": str(max(1, wait))} if status == 429 else None
    return _error(str(exc), status, headers)


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    return _error(str(exc.detail), exc.status_code, exc.headers)


def _unexpected(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unexpected error", exc_info=exc)
    return _error(f"internal error ({type(exc).__name__}); see the server log", 500)


def _client(request: Request[Any, Any, Any]) -> str:
    return request.client.host if request.client else "unknown"


@post("/notify", status_code=202)
async def notify(
    request: Request[Any, Any, Any], service: NamedDependency[VoiceService]
) -> Response[Any]:
    service.check_rate(_client(request))
    payload = parse_notify(await request.body(), service.settings.max_message_chars,
                           service.settings.default_voice_id)  # fmt: skip
    accepted = service.notify(payload)
    if accepted.duplicate:
        message = (f"Duplicate of notification {accepted.id}, accepted "
                   f"{accepted.seconds_after:.1f}s before; spoken once")  # fmt: skip
        return Response({"status": "duplicate", "message": message, "id": accepted.id},
                        status_code=200)  # fmt: skip
    body = {
        "status": "success",
        "message": f"Notification queued (voice {payload.voice.name})",
        "id": accepted.id,
        "priority": payload.priority,
        "place": accepted.place,
    }
    return Response(body, status_code=202)


@get("/metrics", media_type=CONTENT_TYPE)
async def metrics(service: NamedDependency[VoiceService]) -> bytes:
    return service.metrics.exposition()


@get("/health")
async def health(service: NamedDependency[VoiceService]) -> dict[str, object]:
    return service.health()


@post("/v1/audio/speech", status_code=200)
async def speech(request: Request[Any, Any, Any], service: NamedDependency[VoiceService]) -> Stream:
    service.check_rate(_client(request))
    payload = parse_speech(await request.body(), service.settings.max_message_chars,
                           service.settings.default_voice_id)  # fmt: skip
    media_type = "audio/wav" if payload.response_format == "wav" else "audio/pcm"
    headers = {"X-Sample-Rate": str(service.engine.sample_rate)}
    return Stream(service.speech(payload), media_type=media_type, headers=headers)


ENGINES = ("auto", "kokoro-onnx", "kokoro-torch")


def default_engine(settings: Settings) -> Engine:
    """The ONNX engine, or the torch one when asked for or (``auto``) when its weights are there."""
    from voice.engine_torch import TORCH_CONFIG_FILE, TORCH_MODEL_FILE, TorchKokoroEngine

    assets = settings.resolved_assets_dir()
    model = settings.torch_model or assets / TORCH_MODEL_FILE
    config = settings.torch_config or assets / TORCH_CONFIG_FILE
    if settings.engine not in ENGINES:
        raise ValueError(f"unknown engine {settings.engine!r}; choose one of {', '.join(ENGINES)}")
    use_torch = settings.engine == "kokoro-torch" or (
        settings.engine == "auto" and model.is_file() and config.is_file()
    )
    if use_torch:
        return TorchKokoroEngine(model, config, assets / VOICES_FILE, settings.threads)
    return KokoroEngine(assets, settings.threads, warm_languages=warm_languages(settings))


def warm_languages(settings: Settings) -> tuple[str, ...]:
    """The languages whose phonemizer is built with the model: US English and the default
    voice's, when valid (built on a first request, its build, around a CPU-second, would delay
    that request's first sound)."""
    try:
        default = resolve_voice(settings.default_voice_id).language
    except RequestInvalid:
        return ("en-us",)
    return tuple(dict.fromkeys(("en-us", default)))


def default_sink(settings: Settings) -> AudioSink:
    if not settings.audio_enabled:
        return DropSink("audio output disabled (VOICE_AUDIO=0)")
    return SoundDeviceSink()


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    sink: AudioSink | None = None,
    limiter: RateLimiter | None = None,
) -> Litestar:
    """The app; every outside thing can be injected (defaults: Kokoro engine, sound device)."""
    settings = settings or Settings()
    service = VoiceService(
        settings,
        engine or default_engine(settings),
        sink or default_sink(settings),
        RulesFile(settings.resolved_pronunciations()),
        limiter or RateLimiter(settings.rate_per_minute, settings.rate_burst),
    )
    return Litestar(
        route_handlers=[notify, health, metrics, speech, apidocs.assets_route()],
        middleware=guards(settings),
        dependencies={"service": Provide(lambda: service, sync_to_thread=False)},
        exception_handlers={
            VoiceError: _voice_error,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
        request_max_body_size=MAX_BODY_BYTES,
        on_startup=[service.start],
        on_shutdown=[service.stop],
        state={"service": service},  # type: ignore[arg-type]
        openapi_config=OpenAPIConfig(
            title="Voice notification server",
            version=package_version(),
            path="/schema",
            render_plugins=[apidocs.render_plugin()],  # local assets: readable offline
        ),
    )


POST_PATHS = ("/notify", "/v1/audio/speech")
MIN_TOKEN_CHARS = 16


async def _send_error(
    send: Send, status: int, _kind: str, message: str, headers: dict[str, str] | None = None
) -> None:
    """A middleware's answer in this server's error shape."""
    body = json.dumps({"status": "error", "message": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def guards(settings: Settings) -> list[DefineMiddleware]:
    """What a browser page must not do (a foreign Host or Origin, a body that is not JSON) and,
    with a token, who may post at all."""
    exposure = Exposure(settings.host, settings.allowed_hosts, settings.allowed_origins)
    stack = [
        DefineMiddleware(
            for_litestar(ExposureMiddleware),
            exposure=exposure,
            json_paths=POST_PATHS,
            error=_send_error,
        )
    ]
    if settings.token:
        stack.append(
            DefineMiddleware(
                for_litestar(BearerAuthMiddleware),
                token=settings.token,
                exempt=("/health", "/metrics"),
                setting="VOICE_TOKEN",
                error=_send_error,
            )
        )
    return stack


def check_exposure(settings: Settings) -> None:
    """Bound beyond loopback, posting needs a bearer token (anyone on the network could make
    the host speak otherwise)."""
    if is_loopback(settings.host):
        return
    if not settings.token or len(settings.token) < MIN_TOKEN_CHARS:
        raise SystemExit(
            f"voice-server: --host {settings.host} is not a loopback address: set VOICE_TOKEN "
            f"(at least {MIN_TOKEN_CHARS} random characters) so that callers must send "
            "'Authorization: Bearer <token>', or bind 127.0.0.1"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-server", description="Local Kokoro voice notification server"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--host", help="bind address (env VOICE_HOST; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env VOICE_PORT; default 8888)")
    parser.add_argument(
        "--assets-dir", type=Path, help="model + voices directory (env VOICE_ASSETS_DIR)"
    )
    parser.add_argument("--pronunciations", type=Path, help="rules file (env VOICE_PRONUNCIATIONS)")
    parser.add_argument("--threads", type=int, help="onnxruntime threads (env VOICE_THREADS)")
    parser.add_argument("--engine", choices=ENGINES, help="synthesis engine (env VOICE_ENGINE)")
    parser.add_argument("--no-audio", action="store_true", help="never open an audio device")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args = parse_args(argv)
    settings = settings_from_env().with_overrides(
        host=args.host, port=args.port, assets_dir=args.assets_dir,
        pronunciations=args.pronunciations, threads=args.threads, engine=args.engine,
        audio_enabled=False if args.no_audio else None,
    )  # fmt: skip
    check_exposure(settings)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log.info("voice-server on http://%s:%d (assets: %s)", settings.host, settings.port,
             settings.resolved_assets_dir())  # fmt: skip
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=int(settings.stop_seconds) + 5,
    )


if __name__ == "__main__":
    main()

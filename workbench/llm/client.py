"""The chat model the core calls: structured output, retries, cost, metrics, one row per attempt.

``CompatChatModel.complete(prompt_name, messages, response_model)`` sends one chat-completions
request (provider ``compat``: the wire format, whatever the backend), validates the reply into
``response_model`` and accounts for it:

* every answered attempt adds tokens and USD to the ``graph_*`` metrics
  (``Metrics.record_llm_call``; ``record_cache`` when prompt caching applies) and a row to
  ``llm_calls`` (status ``success``, ``invalid`` or ``truncated``);
* every failed attempt counts in ``graph_llm_errors_total{model,error_type}`` and is a row with
  status ``error``; transient ones (429, 5xx, timeouts, connection) are retried with backoff,
  honouring ``Retry-After``, up to ``max_retries``, then raise ``LLMRateLimited``/``LLMTimeout``/
  ``LLMTransientError``; other failures raise ``LLMError`` at once;
* a truncated reply (``finish_reason == "length"``) is retried once with twice the token budget,
  then raises ``TruncatedOutput``; a non-conforming reply raises ``StructuredOutputError``
  (``SchemaEchoError`` when the model answered with a schema), counted with the class name.

The ``openai`` client's own retries are off (``max_retries=0``): this loop owns them, so every
attempt is counted. The API key is handed to the ``openai`` client only; it is never stored on
this object, logged or shown by ``repr``.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import openai

from workbench.clock import Clock, utcnow
from workbench.config import Settings
from workbench.errors import LLMError, StructuredOutputError, TruncatedOutput
from workbench.llm.caching import cache_tokens, caching_applies, to_multipart
from workbench.llm.health import LLMHealth
from workbench.llm.pricing import Cost, PriceTable, Usage, compute_cost
from workbench.llm.profile import HOSTED, PROFILES, LLMProfile, TimeoutModel
from workbench.llm.retry import (
    ErrorInfo,
    RequestThrottle,
    backoff_delay,
    classify_error,
    exhausted_error,
)
from workbench.llm.structured import MODES, StructureT, parse_reply, request_options
from workbench.metrics import Metrics
from workbench.prompts import health_probe as probe_prompt
from workbench.store import Store
from workbench.store.llm_calls import LLMCallRow, defer_llm_call, record_llm_call

if TYPE_CHECKING:
    # the options of the client's low-level ``post``: openai exports no public name for them
    from openai._types import RequestOptions

log = logging.getLogger("workbench.llm")

NO_API_KEY = "not-needed"  # local servers take no key; the openai client insists on one
_MESSAGE_LIMIT = 500


@runtime_checkable
class ChatModel(Protocol):
    """What the core needs from a chat model."""

    model: str

    def complete(
        self,
        prompt_name: str,
        messages: list[dict[str, Any]],
        response_model: type[StructureT],
        *,
        episode_uuid: str | None = None,
        max_tokens: int | None = None,
    ) -> StructureT: ...


@dataclass
class _Call:
    """State of one ``complete`` call across its attempts."""

    prompt_name: str
    episode_uuid: str | None
    structure: str
    attempt: int = 0
    retries: int = 0


@dataclass(frozen=True)
class _Reply:
    text: str | None
    finish_reason: str | None
    usage: Usage
    cost: Cost
    latency: float


class CompatChatModel:
    """:class:`ChatModel` over the ``openai`` package (sync ``openai.OpenAI``)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        metrics: Metrics,
        store: Store | None = None,
        prices: PriceTable | None = None,
        structured_output: str = "json_schema",
        requests_per_minute: int = 120,
        timeout: float = 60.0,
        max_retries: int = 4,
        max_tokens: int = 4096,
        cache_enabled: bool = False,
        log_requests: bool = False,
        clock: Clock = utcnow,
        sleep: Callable[[float], None] = time.sleep,
        client: openai.OpenAI | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        health: LLMHealth | None = None,
        profile: LLMProfile = HOSTED,
    ):
        if structured_output not in MODES:
            raise ValueError(f"structured_output must be one of {MODES}, not {structured_output!r}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.metrics = metrics
        self.store = store
        self._run_id: str | None = None
        self.prices = prices if prices is not None else PriceTable.load()
        self.structured_output = structured_output
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.log_requests = log_requests
        self.caching = caching_applies(cache_enabled, self.base_url, model)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._throttle = RequestThrottle(requests_per_minute, sleep=sleep, monotonic=monotonic)
        self._token_param = "max_tokens"
        self._warned_unpriced: set[str] = set()
        self.profile = profile
        self._slots = profile.slots()
        self._timeouts = TimeoutModel(timeout) if profile.adaptive_timeout else None
        # what the calls observe of the backend (GET /health, the queue's claims)
        self.health = health if health is not None else LLMHealth(clock)
        self._client = client or openai.OpenAI(
            base_url=self.base_url, api_key=api_key or NO_API_KEY, timeout=timeout, max_retries=0
        )

    def share_limits(self, other: object) -> bool:
        """Send through ``other``'s request throttle and in-flight slots when it calls the same
        LLM server: two models of one process (a re-extraction beside live ingestion) then
        load it as one. Whether they are shared."""
        if not isinstance(other, CompatChatModel) or other.base_url != self.base_url:
            return False
        self._throttle, self._slots = other._throttle, other._slots
        return True

    def __repr__(self) -> str:
        return (
            f"CompatChatModel(model={self.model!r}, base_url={self.base_url!r}, "
            f"structured_output={self.structured_output!r}, caching={self.caching})"
        )

    # --- the one public call ---------------------------------------------------------------
    def complete(
        self,
        prompt_name: str,
        messages: list[dict[str, Any]],
        response_model: type[StructureT],
        *,
        episode_uuid: str | None = None,
        max_tokens: int | None = None,
    ) -> StructureT:
        call = _Call(prompt_name, episode_uuid, response_model.__name__)
        messages = self.profile.messages(prompt_name, messages)
        msgs, extra = request_options(self.structured_output, messages, response_model)
        if self.caching:
            msgs = to_multipart(msgs)
        budget = self.profile.budget(prompt_name, max_tokens or self.max_tokens)
        for budget_now in (budget, budget * 2):
            reply = self._send(call, msgs, extra, budget_now)
            if reply.finish_reason == "length":
                self._account(call, reply, TruncatedOutput(call.structure, "cut off"))
                continue
            try:
                result = parse_reply(reply.text, response_model)
            except StructuredOutputError as exc:
                # an answer the workbench cannot use is a failing LLM, like a refused request
                self.health.failed(type(exc).__name__, str(exc))
                self._account(call, reply, exc)
                raise
            self._account(call, reply, None)
            return result
        raise TruncatedOutput(
            call.structure,
            f"the reply was cut off (finish_reason 'length') at max_tokens={budget} and again "
            f"at {budget * 2}; the JSON is incomplete (raise SVC_KNOWLEDGE_LLM_MAX_TOKENS or "
            "shorten the episode)",
        )

    def probe(self, timeout: float = 15.0) -> bool:
        """One small structured request in the configured mode, without retries: whether the
        LLM answers with usable output. The outcome goes to :attr:`health` (``GET /health``
        shows a dead or unusable LLM before the first episode) and is accounted like any
        call (an ``llm_calls`` row ``health_probe``, a few tokens)."""
        call = _Call(probe_prompt.PROMPT_NAME, None, probe_prompt.ProbeReply.__name__)
        call.attempt = 1
        msgs, extra = request_options(
            self.structured_output, probe_prompt.messages(), probe_prompt.ProbeReply
        )
        start = time.perf_counter()
        try:
            with self._slots:  # a one-slot local server: the probe waits its turn too
                completion = self._client.with_options(timeout=timeout).post(
                    "/chat/completions",
                    cast_to=object,
                    body={
                        "model": self.model,
                        "messages": msgs,
                        self._token_param: probe_prompt.MAX_TOKENS,
                        **extra,
                    },
                )
        except openai.OpenAIError as exc:
            info = classify_error(exc)
            self.health.failed(info.error_type, info.message)
            self._record_failure(call, info, time.perf_counter() - start)
            return False
        reply = self._reply(call, completion, time.perf_counter() - start)
        try:
            parse_reply(reply.text, probe_prompt.ProbeReply)
        except StructuredOutputError as exc:
            self.health.failed(type(exc).__name__, str(exc))
            self._account(call, reply, exc)
            return False
        self.health.succeeded()
        self._account(call, reply, None)
        return True

    # --- sending with retries --------------------------------------------------------------
    def _send(
        self, call: _Call, msgs: list[dict[str, Any]], extra: dict[str, Any], budget: int
    ) -> _Reply:
        while True:
            call.attempt += 1
            self._throttle.acquire()
            with self._slots:  # the profile's limit of requests in flight
                start = time.perf_counter()
                try:
                    completion = self._post(msgs, extra, budget)
                except openai.OpenAIError as exc:
                    latency = time.perf_counter() - start
                    info = classify_error(exc)
                    if self._timeouts is not None and info.error_type == "timeout":
                        self._timeouts.timed_out(latency, budget)
                    self.health.failed(info.error_type, info.message)
                    self._record_failure(call, info, latency)
                    failure: tuple[ErrorInfo, BaseException] | None = (info, exc)
                else:
                    failure = None
                    latency = time.perf_counter() - start
            if failure is not None:  # the backoff sleeps without holding the slot
                self._after_failure(call, *failure)
                continue
            self.health.succeeded()
            reply = self._reply(call, completion, latency)
            if self._timeouts is not None:
                self._timeouts.observe(latency, reply.usage.completion_tokens)
            return reply

    def _post(self, msgs: list[dict[str, Any]], extra: dict[str, Any], budget: int) -> object:
        # client.post sends the same request as chat.completions.create without create()'s
        # walk of the typed parameters (~1.7 ms of CPU a call), with the same retries and
        # errors; cast_to=object hands back the decoded JSON instead of building a
        # ChatCompletion model of it (~0.3 ms a call)
        options: RequestOptions = {}
        if self._timeouts is not None:
            options["timeout"] = self._timeouts.timeout(budget)
        return self._client.post(
            "/chat/completions",
            cast_to=object,
            body={"model": self.model, "messages": msgs, self._token_param: budget, **extra},
            options=options,
        )

    def _after_failure(self, call: _Call, info: ErrorInfo, exc: BaseException) -> None:
        """Sleep before the next attempt, or raise when the error is final."""
        if self._switch_token_param(info):
            return
        if not info.transient:
            raise LLMError(
                f"{call.prompt_name}: the LLM at {self.base_url} ({self.model}) refused the "
                f"request: {info.message}"
            ) from exc
        if call.retries >= self.max_retries:
            raise exhausted_error(info, self._exhausted_detail(call, info)) from exc
        call.retries += 1
        self._sleep(backoff_delay(call.retries, info.retry_after, rng=self._rng))

    def _switch_token_param(self, info: ErrorInfo) -> bool:
        """Newer OpenAI models reject ``max_tokens``; switch once to ``max_completion_tokens``."""
        if (
            info.error_type == "BadRequestError"
            and self._token_param == "max_tokens"
            and "max_completion_tokens" in info.message
        ):
            self._token_param = "max_completion_tokens"
            return True
        return False

    def _exhausted_detail(self, call: _Call, info: ErrorInfo) -> str:
        hint = ""
        if info.error_type == "InternalServerError" and self.structured_output == "json_schema":
            hint = (
                " (a local llama.cpp server answers 500 to json_schema requests: set "
                "SVC_KNOWLEDGE_LLM_STRUCTURED_OUTPUT=json_object)"
            )
        return (
            f"{call.prompt_name}: the LLM at {self.base_url} ({self.model}) failed "
            f"{call.attempt} times; last error {info.error_type}: {info.message}{hint}"
        )

    # --- accounting ------------------------------------------------------------------------
    def _reply(self, call: _Call, completion: object, latency: float) -> _Reply:
        """Text, finish reason, usage and cost of a chat-completions JSON body (anything else,
        e.g. a non-JSON reply, has no text: the structure's validation then fails)."""
        if isinstance(completion, str | bytes):  # JSON sent with another content type
            try:
                completion = json.loads(completion)
            except ValueError:
                completion = None
        body = _dict(completion)
        choices = body.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        text, finish = None, None
        if isinstance(choice, dict):
            finish = choice.get("finish_reason")
            message = _dict(choice.get("message"))
            tool_calls = message.get("tool_calls")
            if isinstance(tool_calls, list) and tool_calls:
                text = _text(_dict(_dict(tool_calls[0]).get("function")).get("arguments"))
            else:
                text = _text(message.get("content"))
        usage = usage_from_raw(_dict(body.get("usage")))
        price = self.prices.lookup(self.model, body.get("model"))
        if price is None and usage.reported_cost is None:
            self._warn_unpriced()
        return _Reply(text, finish, usage, compute_cost(usage, price), latency)

    def _warn_unpriced(self) -> None:
        if self.model not in self._warned_unpriced:
            self._warned_unpriced.add(self.model)
            log.warning(
                "no price for model %r in the price table: its calls are counted at "
                "USD 0 (add it with SVC_KNOWLEDGE_PRICE_TABLE_PATH)",
                self.model,
            )

    def _account(self, call: _Call, reply: _Reply, error: Exception | None) -> None:
        usage, cost = reply.usage, reply.cost
        self.metrics.record_llm_call(
            self.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            cost.input,
            cost.output,
            reply.latency,
        )
        if self.caching:
            self.metrics.record_cache(
                self.model,
                usage.cached_tokens > 0,
                usage.cached_tokens,
                cost.cache_saved,
                usage.cache_write_tokens,
            )
        status = "success"
        if error is not None:
            status = "truncated" if isinstance(error, TruncatedOutput) else "invalid"
            self.metrics.record_llm_error(self.model, type(error).__name__)
        self._insert(
            LLMCallRow(
                ts=self._clock(),
                prompt_name=call.prompt_name,
                model=self.model,
                status=status,
                episode_uuid=call.episode_uuid,
                attempt=call.attempt,
                error_type=type(error).__name__ if error else None,
                error_message=_clip(str(error)) if error else None,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cached_tokens=usage.cached_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                input_cost=cost.input,
                output_cost=cost.output,
                total_cost=cost.total,
                cache_cost_saved=cost.cache_saved,
                latency_seconds=reply.latency,
                finish_reason=reply.finish_reason,
            )
        )
        if self.log_requests and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "LLM request %s model=%s status=%s prompt_tokens=%d completion_tokens=%d "
                "cached_tokens=%d cost=$%.8f input_cost=$%.8f output_cost=$%.8f latency=%.3fs",
                call.prompt_name,
                self.model,
                status,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens,
                cost.total,
                cost.input,
                cost.output,
                reply.latency,
            )

    def _record_failure(self, call: _Call, info: ErrorInfo, latency: float) -> None:
        self.metrics.record_llm_error(self.model, info.error_type)
        log.info(
            "LLM request %s attempt %d failed: %s: %s",
            call.prompt_name,
            call.attempt,
            info.error_type,
            info.message,
        )
        self._insert(
            LLMCallRow(
                ts=self._clock(),
                prompt_name=call.prompt_name,
                model=self.model,
                status="error",
                episode_uuid=call.episode_uuid,
                attempt=call.attempt,
                error_type=info.error_type,
                error_message=_clip(info.message),
                latency_seconds=latency,
            )
        )

    def record_into(self, store: Store, run_id: str) -> None:
        """Record every call in ``store`` under ``run_id``, each written as it is made (a
        re-extraction: its calls are on record the moment they are billed)."""
        self.store, self._run_id = store, run_id

    def _insert(self, row: LLMCallRow) -> None:
        if self.store is None:
            return
        if self._run_id is not None:
            record_llm_call(self.store, replace(row, run_id=self._run_id))
        else:
            defer_llm_call(self.store, row)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    """A reply's text: a string; the text parts of a list of content parts; a JSON object
    (tool-call arguments some servers send decoded) as JSON; else None."""
    if isinstance(value, str) or value is None:
        return value
    if isinstance(value, list):
        parts = [_dict(p).get("text") for p in value]
        return "".join(p for p in parts if isinstance(p, str)) or None
    if isinstance(value, dict):
        return json.dumps(value)
    return None


def usage_from_raw(raw: dict[str, Any]) -> Usage:
    """:class:`Usage` from a chat-completions ``usage`` object (with aggregator extras)."""
    cached, written = cache_tokens(raw)
    details = raw.get("cost_details") or {}
    cost = raw.get("cost")
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=cached,
        cache_write_tokens=written,
        reported_cost=float(cost) if isinstance(cost, int | float) else None,
        reported_input_cost=_float(details.get("upstream_inference_prompt_cost")),
        reported_output_cost=_float(details.get("upstream_inference_completions_cost")),
    )


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _clip(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "…"


def build_chat_model(
    settings: Settings,
    *,
    metrics: Metrics,
    store: Store | None = None,
    clock: Clock = utcnow,
    health: LLMHealth | None = None,
) -> CompatChatModel | None:
    """The configured chat model, or None when no LLM is configured (``health``: a record
    shared with a supervisor of the backend)."""
    if not settings.llm_configured:
        return None
    key = settings.compat_api_key.get_secret_value() if settings.compat_api_key else None
    return CompatChatModel(
        base_url=settings.compat_base_url or "",
        api_key=key,
        model=settings.model_name or "",
        metrics=metrics,
        store=store,
        prices=PriceTable.load(settings.price_table_path, maintained=True),
        structured_output=settings.llm_structured_output,
        requests_per_minute=settings.llm_requests_per_minute,
        timeout=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
        max_tokens=settings.llm_max_tokens,
        cache_enabled=settings.prompt_cache_enabled,
        log_requests=settings.prompt_cache_log_requests,
        clock=clock,
        health=health,
        profile=PROFILES[settings.llm_profile],
    )

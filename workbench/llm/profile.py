"""How the chat model paces itself for its backend: ``SVC_KNOWLEDGE_LLM_PROFILE``.

* ``hosted`` (the default): the full prompts (a long fixed prefix that a provider's prompt
  cache reuses), calls in parallel up to the queue's concurrency, a fixed timeout per request
  (``SVC_KNOWLEDGE_LLM_TIMEOUT_SECONDS``).
* ``local``: a model server on the same machine with one slot (llama.cpp, Ollama, a vLLM with
  one sequence). The short prompts of :mod:`workbench.prompts.compact`; ``max_tokens`` bounded
  by the longest valid answer of each prompt (a small model that rambles is cut there instead
  of at the global limit); one request at a time (a second one would only queue inside the
  server, and time out there); and a timeout that grows with the speed the server has shown
  (:class:`TimeoutModel`), so a slow machine is waited for instead of being asked again from
  scratch while it still works on the first request.

``workbench serve --local-llm`` selects ``local`` by itself.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.prompts import compact

ProfileName = Literal["hosted", "local"]


@dataclass(frozen=True)
class LLMProfile:
    name: ProfileName
    compact_prompts: bool = False
    max_concurrent_calls: int = 0  # 0: no limit of the chat model's own
    adaptive_timeout: bool = False
    answer_tokens: dict[str, int] = field(default_factory=dict)  # per prompt name

    def messages(self, prompt_name: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return compact.compact(prompt_name, messages) if self.compact_prompts else messages

    def budget(self, prompt_name: str, budget: int) -> int:
        """``max_tokens`` of a call: the configured budget, bounded by the prompt's longest
        valid answer where the profile knows it."""
        bound = self.answer_tokens.get(prompt_name)
        return min(budget, bound) if bound else budget

    def slots(self) -> contextlib.AbstractContextManager[None]:
        """What a request holds while it is sent (a semaphore when calls are limited)."""
        if self.max_concurrent_calls <= 0:
            return contextlib.nullcontext()
        return _Slots(self.max_concurrent_calls)


class _Slots:
    """A bounded semaphore used as a reusable context manager."""

    def __init__(self, n: int):
        self._sem = threading.BoundedSemaphore(n)

    def __enter__(self) -> None:
        self._sem.acquire()

    def __exit__(self, *exc: object) -> None:
        self._sem.release()


HOSTED = LLMProfile("hosted")
LOCAL = LLMProfile(
    "local",
    compact_prompts=True,
    max_concurrent_calls=1,
    adaptive_timeout=True,
    answer_tokens=dict(compact.ANSWER_TOKENS),
)
PROFILES: dict[str, LLMProfile] = {p.name: p for p in (HOSTED, LOCAL)}


class TimeoutModel:
    """The timeout of the next request, from the speed the backend has shown.

    ``seconds_per_token`` is a moving average of latency / completion tokens over answered
    calls: it includes the prompt's evaluation, so it over-estimates what a long reply takes,
    which is the safe side for a timeout. The timeout for a budget of ``n`` tokens is
    ``margin × n × seconds_per_token``, never below the configured ``floor``. A request that
    timed out doubles the estimate: the backend was slower than it had shown (another process
    took the CPU), and the next attempt waits for it.
    """

    def __init__(self, floor: float, margin: float = 2.0, weight: float = 0.3):
        self.floor, self.margin, self.weight = floor, margin, weight
        self.seconds_per_token: float | None = None
        self._lock = threading.Lock()

    def timeout(self, budget: int) -> float:
        with self._lock:
            if self.seconds_per_token is None:
                return self.floor
            return max(self.floor, self.margin * budget * self.seconds_per_token)

    def observe(self, latency: float, completion_tokens: int) -> None:
        if completion_tokens <= 0 or latency <= 0:
            return
        sample = latency / completion_tokens
        with self._lock:
            old = self.seconds_per_token
            self.seconds_per_token = (
                sample if old is None else (1 - self.weight) * old + self.weight * sample
            )

    def timed_out(self, latency: float, budget: int) -> None:
        """A request of ``budget`` tokens was cut after ``latency`` seconds."""
        with self._lock:
            shown = latency / max(1, budget)
            self.seconds_per_token = 2 * max(self.seconds_per_token or 0.0, shown)

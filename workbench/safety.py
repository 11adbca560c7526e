"""Secrets out of any text the product stores or returns, and limits on untrusted JSON.

**Scrubbing.** An upstream's error text may echo what it was sent (gateways repeat the
``Authorization`` header), and that text flows into the database (``queue.error_message``,
``llm_calls.error_message``, ``episodes.status_detail``), into tool results and exports, and
into logs. :func:`scrub` replaces every registered secret value and anything shaped like a
bearer token, an ``api_key=…`` pair or an ``sk-…`` key by ``[REDACTED]``. A pattern takes only
a value shaped like a credential (:func:`looks_secret`: a digit among 8 characters or more, or
20 or more with both cases), never an ordinary word: "needs its token: set
SVC_KNOWLEDGE_API_TOKEN" or "send Authorization: Bearer <token>" stay readable. Secrets are
registered once by whoever holds them (the settings' keys and token, a client given a key):
:func:`register_secret` keeps them in one process-wide set, as logging's handlers are
process-wide, so a store function or a log formatter needs no handle to pass them along.

**JSON limits.** Python's parser recurses once per nesting level, so a document nested a few
thousand levels deep raises ``RecursionError`` — a crash where the caller deserves a 400.
:func:`json_depth` measures nesting without parsing (strings are skipped) so bodies and JSON
episodes are refused before anything parses them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

REDACTED = "[REDACTED]"
MIN_SECRET = 4  # shorter values would redact ordinary words
MAX_JSON_DEPTH = 64

# (prefix kept, value) pairs: the value is replaced when it looks like a credential
_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)([A-Za-z0-9._~+/=-]+)"),
    re.compile(
        r"(?i)((?:api[_-]?key|token|password|secret|authorization)[\"']?\s*[:=]\s*[\"']?)"
        r"([^\s\"',;]+)"
    ),
)
# an OpenAI-style key, whatever its letters
_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")
MIN_PATTERN_SECRET = 8
MIN_LETTERS_SECRET = 20

_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(*values: str | None) -> None:
    """Scrub these values from now on, in this process (empty and very short ones are
    ignored)."""
    with _lock:
        _registered.update(v for v in values if v and len(v) >= MIN_SECRET)


class Redactor:
    """:func:`scrub` with extra secrets of its own (the process-wide ones always apply)."""

    def __init__(self, secrets: Iterable[str | None] = ()):
        self._secrets: set[str] = set()
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= MIN_SECRET:
            self._secrets.add(secret)

    def __call__(self, text: str) -> str:
        with _lock:
            secrets = self._secrets | _registered
        for secret in sorted(secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(_keep_prefix, text)
        return _KEY.sub(REDACTED, text)


def looks_secret(value: str) -> bool:
    """Whether a value after ``Bearer`` or ``token:``/``api_key=``… is shaped like a
    credential rather than a word, a placeholder or a setting's name: 8 characters or more
    with a digit, or 20 or more mixing lower and upper case (random tokens are)."""
    if len(value) < MIN_PATTERN_SECRET:
        return False
    if any(c.isdigit() for c in value):
        return True
    has_both = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return len(value) >= MIN_LETTERS_SECRET and has_both


def _keep_prefix(match: re.Match[str]) -> str:
    prefix, value = match.group(1), match.group(2)
    return prefix + (REDACTED if looks_secret(value) else value)


_default = Redactor()


def scrub(text: str | None) -> str | None:
    """``text`` with every registered secret and secret-looking token replaced."""
    return None if text is None else _default(str(text))


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def json_depth(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of a JSON text (objects and arrays), counting no further than
    ``limit + 1``; brackets inside strings do not count."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub(b'""', data)):
        if bracket in (b"{", b"["):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        else:
            depth -= 1
    return deepest

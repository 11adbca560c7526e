"""Pronunciation rules: replace terms by how they should be spoken, before synthesis.

The rules file is one JSON object mapping a term to its spoken form::

    {
      "kubectl": "cube control",
      "PostgreSQL": "post gres Q L",
      "Knowledge Workbench": "knowledge work bench"
    }

A term matches as a whole word (not inside a longer word), ignoring case; when terms overlap
the longest wins. Keys starting with ``//`` are comments and ignored. The file is reloaded when
it changes; a bad file is reported (``/health`` and the log) and the last good rules stay in use.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from voice.errors import PronunciationFileInvalid

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rules:
    """Compiled pronunciation rules (immutable)."""

    replacements: Mapping[str, str] = field(default_factory=dict)  # casefolded term -> spoken
    pattern: re.Pattern[str] | None = None

    def __len__(self) -> int:
        return len(self.replacements)


NO_RULES = Rules()


def compile_rules(mapping: Mapping[str, str]) -> Rules:
    """Compile term -> spoken form pairs into one whole-word, case-insensitive regex.

    Longer terms come first in the alternation, so the longest match wins.
    """
    replacements = {term.strip().casefold(): spoken for term, spoken in mapping.items()}
    if not replacements:
        return NO_RULES
    terms = sorted(replacements, key=lambda t: (-len(t), t))
    alternation = "|".join(re.escape(t) for t in terms)
    pattern = re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.IGNORECASE)
    return Rules(replacements=replacements, pattern=pattern)


def apply_rules(text: str, rules: Rules) -> str:
    """Replace every rule term in ``text`` by its spoken form."""
    if rules.pattern is None:
        return text
    return rules.pattern.sub(lambda m: rules.replacements[m.group(0).casefold()], text)


def parse_rules(raw: str, source: str = "rules") -> Rules:
    """Parse the JSON text of a rules file; raise PronunciationFileInvalid naming every problem."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise PronunciationFileInvalid(f"{source}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise PronunciationFileInvalid(
            f"{source}: must be one JSON object mapping term to spoken form, "
            f"got {type(data).__name__}"
        )
    problems = [
        f"{key!r}: spoken form must be a string"
        for key, val in data.items()
        if not isinstance(val, str)
    ] + ["empty term" for key in data if not key.strip()]
    if problems:
        raise PronunciationFileInvalid(f"{source}: " + "; ".join(problems))
    return compile_rules({k: v for k, v in data.items() if not k.startswith("//")})


class RulesFile:
    """A rules file reloaded when its modification time or size changes.

    ``rules()`` never raises: a missing file means no rules; a bad file keeps the last good
    rules and sets ``error`` (also logged once per change).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.error: str | None = None
        self._rules = NO_RULES
        self._stamp: tuple[float, int] | None = None
        self._lock = threading.Lock()

    def rules(self) -> Rules:
        with self._lock:
            self._reload_if_changed()
            return self._rules

    def status(self) -> dict[str, object]:
        rules = self.rules()
        return {
            "path": str(self.path) if self.path else None,
            "rules": len(rules),
            "error": self.error,
        }

    def _reload_if_changed(self) -> None:
        stamp = self._current_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        if stamp is None:
            self._rules, self.error = NO_RULES, None
            return
        assert self.path is not None
        try:
            self._rules = parse_rules(self.path.read_text(encoding="utf-8"), str(self.path))
            self.error = None
            log.info("pronunciation rules loaded: %d from %s", len(self._rules), self.path)
        except (OSError, UnicodeDecodeError, PronunciationFileInvalid) as exc:
            self.error = f"{exc}; keeping the previous {len(self._rules)} rules. Fix the file."
            log.error("pronunciation rules file rejected: %s", self.error)

    def _current_stamp(self) -> tuple[float, int] | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

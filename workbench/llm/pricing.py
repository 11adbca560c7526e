"""Model prices and the pure cost arithmetic of one LLM call.

Where the table lives
    The canonical table ships inside the package, ``workbench/data/prices.json``, and is read
    through ``importlib.resources`` (so it works from a wheel). ``data/prices.json`` at the
    repository root is only an *example user file*: it is never read implicitly. A user adds or
    changes prices with their own file of the same format, named by
    ``SVC_KNOWLEDGE_PRICE_TABLE_PATH``; :meth:`PriceTable.load` merges it over the package table
    (the user's entries win, model by model).

Format
    ``{"models": {"<exact name>": {"input": 2.5, "output": 10.0, "cached_read": 1.25,
    "cache_write": 3.75, "aliases": ["openai/gpt-4o", ...]}}}`` — USD per one million tokens.
    ``cached_read`` defaults to 0.25 × input (the spec's cached-input price), ``cache_write`` to
    the input price.

Sources, first match wins
    1. the user's file (``SVC_KNOWLEDGE_PRICE_TABLE_PATH``): an override, model by model;
    2. with ``maintained=True`` (the service), :class:`MaintainedPrices`: the ``genai-prices``
       package, a continually updated table of hundreds of models and providers (its bundled
       data: no network);
    3. the package table, for what neither knows.

Lookup
    exact name → alias → case-insensitive, without a provider prefix (``anthropic/``) and without
    a date suffix (``-2024-08-06``, ``-20250929``) or an aggregator variant (``:beta``).

Cost rules (the spec's "Cost" and "Prompt caching rules")
    * A response's own ``usage.cost`` (aggregators send it) wins over the table. Its split into
      input/output follows ``usage.cost_details`` when present, else the table's proportions,
      else the token proportions.
    * ``prompt_tokens`` includes cached and cache-written tokens (chat-completions convention):
      uncached input is billed at ``input``, cached tokens at ``cached_read``, written tokens at
      ``cache_write``; the saving of a cache read is ``cached × (input − cached_read)``.
    * An unknown model costs 0 (the caller logs one warning naming it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError

PER_TOKENS = 1_000_000
CACHED_READ_FACTOR = 0.25

_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


@dataclass(frozen=True)
class ModelPrice:
    """USD per one million tokens."""

    input: float
    output: float
    cached_read: float
    cache_write: float

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> ModelPrice:
        inp = float(entry["input"])
        cached = entry.get("cached_read")
        write = entry.get("cache_write")
        return cls(
            input=inp,
            output=float(entry["output"]),
            cached_read=inp * CACHED_READ_FACTOR if cached is None else float(cached),
            cache_write=inp if write is None else float(write),
        )


@dataclass(frozen=True)
class Usage:
    """Token counts of one reply (``prompt_tokens`` includes cached and written tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reported_cost: float | None = None
    reported_input_cost: float | None = None
    reported_output_cost: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Cost:
    """The USD split of one call. ``total == input + output``."""

    input: float = 0.0
    output: float = 0.0
    cache_saved: float = 0.0
    source: str = "none"  # response | table | none

    @property
    def total(self) -> float:
        return self.input + self.output


def normalize_model_name(name: str) -> str:
    """Lower-case, without provider prefix, aggregator variant and date suffix."""
    text = name.strip().lower()
    text = text.rsplit("/", 1)[-1]
    text = text.split(":", 1)[0]
    return _DATE_SUFFIX.sub("", text)


class MaintainedPrices:
    """Prices from ``genai-prices`` (an optional package; without it, none), USD per 1M tokens
    derived from its own arithmetic, remembered per model name."""

    def __init__(self) -> None:
        self._known: dict[str, ModelPrice | None] = {}

    def lookup(self, name: str) -> ModelPrice | None:
        if name not in self._known:
            self._known[name] = _maintained_price(name)
        return self._known[name]


def _maintained_price(name: str) -> ModelPrice | None:
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None

    # priced on 1,000 tokens: a long-context tier (e.g. past 200K tokens) is not the base price
    sample = 1000

    def per_million(**tokens: int) -> float:
        usage = Usage(**tokens)
        total = calc_price(usage, model_ref=name.rsplit("/", 1)[-1]).total_price
        return float(total) * PER_TOKENS / sample

    try:
        return ModelPrice(
            input=per_million(input_tokens=sample),
            output=per_million(output_tokens=sample),
            cached_read=per_million(input_tokens=sample, cache_read_tokens=sample),
            cache_write=per_million(input_tokens=sample, cache_write_tokens=sample),
        )
    except (LookupError, ValueError, TypeError):
        return None


@dataclass
class PriceTable:
    """Prices by exact model name, with aliases and a normalised index (the user's entries
    and a :class:`MaintainedPrices` source, when given, come first)."""

    prices: dict[str, ModelPrice] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    maintained: MaintainedPrices | None = None
    user: PriceTable | None = None  # the user's file: wins over every other source
    # normalised name -> first table key with that name (built on first use, once per table)
    _normalised: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PriceTable:
        table = cls()
        table.merge(data)
        return table

    @classmethod
    def load(cls, path: str | Path | None = None, maintained: bool = False) -> PriceTable:
        """The package table, merged with the user's file at ``path`` when given; with
        ``maintained``, ``genai-prices`` before the package table (the user's file first)."""
        text = resources.files("workbench").joinpath("data/prices.json").read_text("utf-8")
        table = cls.from_dict(json.loads(text))
        if path:
            user = _read_user_file(Path(path))
            table.merge(user)
            if maintained:
                table.user = cls.from_dict(user)
        if maintained:
            table.maintained = MaintainedPrices()
        return table

    def merge(self, data: dict[str, Any]) -> None:
        """Add (or replace) the models of ``data`` (the ``{"models": {...}}`` format)."""
        self._normalised = None
        for name, entry in (data.get("models") or {}).items():
            try:
                self.prices[name] = ModelPrice.from_entry(entry)
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"price table entry {name!r} needs numeric 'input' and 'output' "
                    f"(USD per 1M tokens): {exc}"
                ) from None
            for alias in entry.get("aliases") or ():
                self.aliases[alias] = name

    def lookup(self, *names: str | None) -> ModelPrice | None:
        """The price of the first of ``names`` the table knows, else None."""
        for name in names:
            if name:
                price = self._lookup_one(name)
                if price is not None:
                    return price
        return None

    def _lookup_one(self, name: str) -> ModelPrice | None:
        for source in (self.user, self.maintained):
            price = source.lookup(name) if source is not None else None
            if price is not None:
                return price
        return self._own(name)

    def _own(self, name: str) -> ModelPrice | None:
        if name in self.prices:
            return self.prices[name]
        if name in self.aliases:
            return self.prices[self.aliases[name]]
        if self._normalised is None:
            index: dict[str, str] = {}
            for key in (*self.prices, *self.aliases):
                index.setdefault(normalize_model_name(key), key)
            self._normalised = index
        found = self._normalised.get(normalize_model_name(name))
        return None if found is None else self.prices[self.aliases.get(found, found)]

    def __contains__(self, name: str) -> bool:
        return self.lookup(name) is not None


def _read_user_file(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.expanduser().read_text("utf-8"))
        return data
    except FileNotFoundError:
        raise ConfigError(f"SVC_KNOWLEDGE_PRICE_TABLE_PATH: no file at {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"SVC_KNOWLEDGE_PRICE_TABLE_PATH: {path} is not JSON: {exc}") from None


# --- pure cost arithmetic --------------------------------------------------------------------
def table_cost(usage: Usage, price: ModelPrice) -> Cost:
    """Cost of ``usage`` at ``price`` (cached and written input at their own prices)."""
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    written = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
    plain = usage.prompt_tokens - cached - written
    input_cost = (
        plain * price.input + cached * price.cached_read + written * price.cache_write
    ) / PER_TOKENS
    output_cost = usage.completion_tokens * price.output / PER_TOKENS
    return Cost(
        input=input_cost,
        output=output_cost,
        cache_saved=cache_saving(cached, price),
        source="table",
    )


def cache_saving(cached_tokens: int, price: ModelPrice | None) -> float:
    """USD saved by reading ``cached_tokens`` from the cache instead of paying full input."""
    if price is None or cached_tokens <= 0:
        return 0.0
    return cached_tokens * max(0.0, price.input - price.cached_read) / PER_TOKENS


def reported_cost(usage: Usage, price: ModelPrice | None) -> Cost:
    """Split the response's own ``usage.cost`` into input and output."""
    total = float(usage.reported_cost or 0.0)
    saved = cache_saving(usage.cached_tokens, price)
    if usage.reported_input_cost is not None and usage.reported_output_cost is not None:
        inp, out = float(usage.reported_input_cost), float(usage.reported_output_cost)
        if inp + out > 0:
            share = inp / (inp + out)
            return Cost(
                input=total * share,
                output=total * (1 - share),
                cache_saved=saved,
                source="response",
            )
    if price is not None:
        by_table = table_cost(usage, price)
        if by_table.total > 0:
            share = by_table.input / by_table.total
            return Cost(
                input=total * share,
                output=total * (1 - share),
                cache_saved=saved,
                source="response",
            )
    tokens = usage.total_tokens
    share = usage.prompt_tokens / tokens if tokens else 1.0
    return Cost(
        input=total * share, output=total * (1 - share), cache_saved=saved, source="response"
    )


def compute_cost(usage: Usage, price: ModelPrice | None) -> Cost:
    """The response's own cost when it sent one, else the table's, else zero."""
    if usage.reported_cost is not None:
        return reported_cost(usage, price)
    if price is not None:
        return table_cost(usage, price)
    return Cost()

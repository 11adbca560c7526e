"""Price table and the pure cost arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.errors import ConfigError
from workbench.llm.pricing import (
    ModelPrice,
    PriceTable,
    Usage,
    cache_saving,
    compute_cost,
    normalize_model_name,
    table_cost,
)

GPT = ModelPrice(input=2.5, output=10.0, cached_read=1.25, cache_write=2.5)
CLAUDE = ModelPrice(input=3.0, output=15.0, cached_read=0.3, cache_write=3.75)


@pytest.fixture(scope="module")
def table():
    return PriceTable.load()


def test_package_table_has_the_main_families(table):
    for name in (
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-5",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "gemini-2.5-flash",
        "deepseek-chat",
        "llama-3.3-70b-instruct",
    ):
        assert name in table, name
    for price in table.prices.values():
        assert price.input >= 0 and price.output >= 0 and 0 <= price.cached_read <= price.input


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("openai/gpt-4o-mini", "gpt-4o-mini"),  # alias
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # alias with date
        ("OpenAI/GPT-4o-Mini-2030-01-01", "gpt-4o-mini"),  # normalised
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic/claude-haiku-4.5:beta", "claude-haiku-4-5"),  # aggregator variant
    ],
)
def test_lookup_by_exact_name_alias_and_normalised_name(table, name, canonical):
    assert table.lookup(name) == table.prices[canonical]


def test_lookup_unknown_and_first_known(table):
    assert table.lookup("mystery-model") is None
    assert table.lookup(None, "mystery", "gpt-4o") == table.prices["gpt-4o"]


def test_normalize_model_name():
    assert normalize_model_name("Anthropic/Claude-3-5-Haiku-20241022") == "claude-3-5-haiku"
    assert normalize_model_name("meta-llama/llama-3.3-70b-instruct:free") == (
        "llama-3.3-70b-instruct"
    )


def test_defaults_cached_read_quarter_and_cache_write_input():
    price = ModelPrice.from_entry({"input": 4.0, "output": 8.0})
    assert price.cached_read == 1.0 and price.cache_write == 4.0


def test_user_file_is_merged_over_the_package_table(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    "gpt-4o": {"input": 1.0, "output": 2.0},
                    "my-local": {"input": 0, "output": 0, "aliases": ["local/mine"]},
                }
            }
        )
    )
    table = PriceTable.load(path)
    assert table.lookup("gpt-4o") == ModelPrice(1.0, 2.0, 0.25, 1.0)
    assert table.lookup("local/mine") == ModelPrice(0.0, 0.0, 0.0, 0.0)
    assert table.lookup("claude-sonnet-4-5") is not None  # package entries stay


def test_repository_example_file_loads():
    table = PriceTable.load(Path(__file__).parents[2] / "data" / "prices.json")
    assert table.lookup("SmolLM2-135M-Instruct") == ModelPrice(0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no file"),
        ("{not json", "is not JSON"),
        ('{"models": {"x": {"input": "cheap"}}}', "numeric 'input' and 'output'"),
    ],
)
def test_bad_user_files_raise_config_error(tmp_path, content, message):
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        PriceTable.load(path)


def test_table_cost_plain():
    cost = table_cost(Usage(prompt_tokens=1_000_000, completion_tokens=500_000), GPT)
    assert (cost.input, cost.output, cost.total, cost.source) == (2.5, 5.0, 7.5, "table")
    assert cost.cache_saved == 0


def test_table_cost_with_cache_read_and_write():
    usage = Usage(
        prompt_tokens=10_000, completion_tokens=1_000, cached_tokens=6_000, cache_write_tokens=3_000
    )
    cost = table_cost(usage, CLAUDE)
    assert cost.input == pytest.approx((1_000 * 3.0 + 6_000 * 0.3 + 3_000 * 3.75) / 1e6)
    assert cost.output == pytest.approx(1_000 * 15.0 / 1e6)
    assert cost.cache_saved == pytest.approx(6_000 * 2.7 / 1e6)


def test_cached_tokens_never_exceed_prompt_tokens():
    cost = table_cost(Usage(prompt_tokens=100, cached_tokens=500, cache_write_tokens=50), GPT)
    assert cost.input == pytest.approx(100 * 1.25 / 1e6)


def test_cache_saving_is_75_percent_at_the_default_cached_price():
    price = ModelPrice.from_entry({"input": 4.0, "output": 8.0})
    assert cache_saving(1_000_000, price) == pytest.approx(3.0)
    assert cache_saving(1_000, None) == 0.0


def test_reported_cost_wins_and_is_split_by_table_proportions():
    cost = compute_cost(
        Usage(prompt_tokens=1_000_000, completion_tokens=500_000, reported_cost=1.5), GPT
    )
    assert cost.source == "response"
    assert (cost.input, cost.output) == pytest.approx((0.5, 1.0))


def test_reported_cost_details_give_the_split():
    usage = Usage(
        prompt_tokens=10,
        completion_tokens=10,
        reported_cost=0.4,
        reported_input_cost=0.1,
        reported_output_cost=0.3,
    )
    assert (compute_cost(usage, GPT).input, compute_cost(usage, GPT).output) == pytest.approx(
        (0.1, 0.3)
    )


def test_reported_cost_of_an_unknown_model_split_by_tokens():
    cost = compute_cost(Usage(prompt_tokens=300, completion_tokens=100, reported_cost=0.04), None)
    assert (cost.input, cost.output) == pytest.approx((0.03, 0.01))


def test_unknown_model_without_reported_cost_is_free():
    cost = compute_cost(Usage(prompt_tokens=300, completion_tokens=100), None)
    assert (cost.total, cost.source) == (0.0, "none")


def test_zero_reported_cost_is_respected():
    cost = compute_cost(Usage(prompt_tokens=300, completion_tokens=100, reported_cost=0.0), GPT)
    assert cost.total == 0.0 and cost.source == "response"


# --- the maintained source (genai-prices) ---------------------------------------------------------
def test_maintained_prices_cover_models_the_package_table_lacks():
    shipped, maintained = PriceTable.load(), PriceTable.load(maintained=True)
    assert shipped.lookup("claude-opus-4-5") is None
    opus = maintained.lookup("claude-opus-4-5")
    assert opus is not None and opus.input > 0 and opus.output > opus.input
    assert maintained.lookup("no-such-model-anywhere") is None


def test_maintained_prices_are_the_base_tier_and_agree_on_a_shipped_model():
    """Long-context tiers (past 200K tokens) are not the per-token base price."""
    shipped, maintained = PriceTable.load(), PriceTable.load(maintained=True)
    for name in ("gpt-4o", "claude-sonnet-4-5"):
        assert maintained.lookup(name).input == pytest.approx(shipped.lookup(name).input)
        assert maintained.lookup(name).output == pytest.approx(shipped.lookup(name).output)


def test_the_users_file_overrides_the_maintained_prices(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"claude-opus-4-5": {"input": 1.0, "output": 2.0}}}))
    table = PriceTable.load(path, maintained=True)
    assert table.lookup("claude-opus-4-5").input == 1.0
    assert table.lookup("anthropic/claude-opus-4-5").output == 2.0

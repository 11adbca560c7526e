import pydantic
import pytest

from workbench import errors
from workbench.ingest.queue.retry import categorize, decide


class RateLimitError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "category"),
    [
        (errors.LLMRateLimited("429"), "RateLimitError"),
        (errors.LLMTimeout("slow"), "TimeoutError"),
        (TimeoutError(), "TimeoutError"),
        (errors.LLMTransientError("refused"), "ConnectionError"),
        (ConnectionRefusedError(), "ConnectionError"),
        (errors.EmbedderError("down"), "ConnectionError"),
        (errors.StructuredOutputError("ExtractedEntities", "bad"), "ValidationError"),
        (errors.SchemaEchoError("NodeResolutions", "schema"), "ValidationError"),
        (ValueError("x"), "ValidationError"),
        (RateLimitError(), "RateLimitError"),
        (KeyError("x"), "UnknownError"),
    ],
)
def test_categories_are_the_spec_ones(exc, category):
    assert categorize(exc) == category


def test_pydantic_errors_are_validation_errors():
    class M(pydantic.BaseModel):
        x: int

    with pytest.raises(pydantic.ValidationError) as info:
        M(x="no")
    assert categorize(info.value) == "ValidationError"


def test_transient_errors_back_off_exponentially_with_jitter_until_the_limit():
    delays = [
        decide("RateLimitError", n, 0, 5, base_delay=2, rand=lambda: 0.5).delay
        for n in (1, 2, 3, 4)
    ]
    assert delays == [2, 4, 8, 16]
    assert decide("TimeoutError", 1, 0, 5, rand=lambda: 0.0).delay == 1.0  # jitter 0.5x
    assert decide("ConnectionError", 5, 0, 5).action == "fail"
    assert decide("RateLimitError", 30, 0, 99, max_delay=300, rand=lambda: 0.5).delay == 300


def test_validation_errors_are_retried_once_then_fail():
    assert decide("ValidationError", 1, 0, 6).action == "retry"
    assert decide("ValidationError", 2, 1, 6).action == "fail"


def test_unknown_errors_fail_at_once():
    assert decide("UnknownError", 1, 0, 6).action == "fail"

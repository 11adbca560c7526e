from tests.fakes.fixtures import fake_llm  # noqa: F401

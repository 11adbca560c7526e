"""Fakes that speak the real wire protocol (see ``tests/fakes/fake_llm.py``)."""

from tests.fakes.fake_llm import (
    FakeLLMServer,
    FakeReply,
    RecordedRequest,
    message_text,
    minimal_instance,
    request_mode,
    requested_schema,
    structure_name,
)

__all__ = [
    "FakeLLMServer",
    "FakeReply",
    "RecordedRequest",
    "message_text",
    "minimal_instance",
    "request_mode",
    "requested_schema",
    "structure_name",
]

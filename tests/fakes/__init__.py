"""Fakes that speak the real wire protocol (see ``workbench/fakes/chat_server.py``)."""

from workbench.fakes.chat_server import (
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

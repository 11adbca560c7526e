"""LLM access for the core: one structured chat call, priced, cached, retried and recorded.

Public API::

    from workbench.llm import ChatModel, CompatChatModel, build_chat_model, PriceTable

Modules: ``client`` (the chat model), ``structured`` (request modes, schema transforms, reply
parsing), ``pricing`` (price table and cost arithmetic), ``caching`` (prompt-caching rules),
``retry`` (error classification, backoff, the requests-per-minute throttle).
"""

from workbench.llm.client import ChatModel, CompatChatModel, build_chat_model, usage_from_raw
from workbench.llm.pricing import (
    Cost,
    ModelPrice,
    PriceTable,
    Usage,
    compute_cost,
    normalize_model_name,
    table_cost,
)
from workbench.llm.structured import grammar_schema, parse_reply, request_options

__all__ = [
    "ChatModel",
    "CompatChatModel",
    "Cost",
    "ModelPrice",
    "PriceTable",
    "Usage",
    "build_chat_model",
    "compute_cost",
    "grammar_schema",
    "normalize_model_name",
    "parse_reply",
    "request_options",
    "table_cost",
    "usage_from_raw",
]

"""The start-up probe of the LLM: the cheapest request that still asks for structured output
in the configured mode (a few tokens each way), so that a backend that cannot answer in that
mode shows as failing before the first episode, not after it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

PROMPT_NAME = "health_probe"
MAX_TOKENS = 256  # room for a model that thinks before it answers


class ProbeReply(BaseModel):
    ok: bool


def messages() -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": 'Answer with this JSON object and nothing else: {"ok": true}',
        }
    ]

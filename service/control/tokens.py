"""``workbench tokens add``: the first scoped token never locks the owner out.

Without any token, every local caller may use every group. The first token that is not an
admin one makes every call need a token; if the store holds no admin token then, nobody could
list or revoke tokens through the background service any more and the owner's own stdio
clients would be refused. So :func:`ensure_owner` first creates an
admin token for the owner, saves it where the owner's local clients find it
(:mod:`service.client.owner`) and says what changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from service.client.owner import OWNER_NAME, save_owner_token
from workbench.config import Settings
from workbench.errors import WorkbenchError

ToolCall = Callable[[str, dict[str, Any]], Any]


def ensure_owner(settings: Settings, call: ToolCall) -> str | None:
    """Before a scoped token on a database without a stored admin token: the owner's admin
    token, created and saved; returns what to tell the person (None: nothing was needed).
    ``SVC_KNOWLEDGE_API_TOKEN`` does not count: it is the admin secret of a service started
    with it, and the background service of ``workbench mcp`` never takes one."""
    tokens = call("list_tokens", {}).get("tokens", [])
    if any(token.get("admin") for token in tokens):
        return None
    taken = {token.get("name") for token in tokens}
    name = next(n for n in _names() if n not in taken)
    made = call("add_token", {"name": name, "groups": [], "read_only": False, "admin": True})
    where = _save(settings, name, made["token"])
    return (
        "this is the first scoped token: from now on every call to the tools needs a token "
        "(a call without one gets 401). So that you keep every group, the admin token "
        f"{name!r} was created first{where}; it is shown only now:\n{made['token']}"
    )


def _names() -> Iterator[str]:
    yield OWNER_NAME
    number = 2
    while True:
        yield f"{OWNER_NAME}-{number}"
        number += 1


def _save(settings: Settings, name: str, token: str) -> str:
    """Where the owner's local clients find the token (said to the person)."""
    if settings.database_url is not None or settings.db_location() == ":memory:":
        return " (set SVC_KNOWLEDGE_API_TOKEN to it in your clients)"
    try:
        path = save_owner_token(settings.db_location(), name, token)
    except WorkbenchError as exc:
        return f" (it could not be saved: {exc.message}; set SVC_KNOWLEDGE_API_TOKEN to it)"
    return (
        f" and saved in {path} (mode 0600): your local `workbench mcp` clients and the CLI "
        "use it when SVC_KNOWLEDGE_API_TOKEN is not set"
    )

"""The owner's token: how the person whose database it is keeps reaching it once tokens exist.

With no token anywhere, every caller on loopback may use every group (the single-user set-up).
The first scoped token (`workbench tokens add alice --groups alpha`) ends that: from then on
every call needs a token. So that the owner is not locked out, that first ``tokens add`` makes
an admin token for the owner first (named ``owner``), stored hashed like every token and saved
in ``<db>.owner-token`` beside the database: a private regular file of this user (0600, written
and read never through a symbolic link).

The rule a local client (``workbench mcp``, the CLI, a notebook) follows: it sends
``SVC_KNOWLEDGE_API_TOKEN`` when that is set (resolved to its own scope, never more), else the
owner's token from that file when the file can be trusted. A file of another user, open to
others or a symbolic link is ignored, so the token goes nowhere a planted file names.
"""

from __future__ import annotations

import json
from pathlib import Path

from service.client.private import _read_private, write_private
from workbench.config import Settings

OWNER_SUFFIX = ".owner-token"
OWNER_NAME = "owner"


def owner_token_path(db: str | Path) -> Path:
    path = Path(db).expanduser().resolve()
    return path.with_name(path.name + OWNER_SUFFIX)


def read_owner_token(db: str | Path) -> str | None:
    """The owner's token saved beside ``db``, if the file can be trusted; else None."""
    if str(db) == ":memory:":
        return None
    body = _read_private(owner_token_path(db), what="the owner's token file")
    token = body.get("token") if body else None
    return token if isinstance(token, str) and token.startswith("wbt_") else None


def save_owner_token(db: str | Path, name: str, token: str) -> Path:
    """Save the owner's token beside ``db`` (0600, never through a link)."""
    path = owner_token_path(db)
    write_private(path, json.dumps({"name": name, "token": token}) + "\n")
    return path


def client_token(settings: Settings) -> str | None:
    """The token a local client sends: ``SVC_KNOWLEDGE_API_TOKEN``, else the owner's."""
    token = settings.api_token.get_secret_value() if settings.api_token else ""
    if token:
        return token
    if settings.database_url is not None:
        return None
    return read_owner_token(settings.db_location())

"""Who may call what: the caller of a request, resolved once, and its scope checked in one
place for every tool of :data:`service.api.tools.TOOLS`, REST and MCP alike.

* :class:`TokenResolver` — a bearer token → a :class:`~workbench.store.tenancy.Caller`:
  ``SVC_KNOWLEDGE_API_TOKEN`` is the admin; any other token is looked up by its hash in the
  store (so every replica sees the same tokens) and remembered for ``ttl`` seconds: a revoked
  token is refused within that time.
* :class:`ScopedAuthMiddleware` — when any token exists (the setting or the store), every path
  but the exempt ones needs one; the caller goes into the ASGI scope (:data:`CALLER_KEY`).
* :func:`guarded_call` — the one check of a tool call: admin-only tools, read-only tokens,
  every group argument (``group_id``, ``group_ids``, an import line's ``group_id``), every
  uuid argument (an item of another group is a 404 worded like a missing one), an omitted
  group list narrowed to the caller's groups, rows of other groups dropped from the answer,
  the groups an answer covered, and the audit trail of the writes that remove or change
  memories. A tool added to the table inherits all of it through its argument names.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeGuard, cast

import anyio

from serving.asgi import ASGIApp, Receive, Scope, Send
from serving.errors import retry_headers, send_error
from serving.middleware import UNAUTHORIZED_HEADERS, bearer_refusal
from workbench.errors import Forbidden, NotFound, StoreError, WorkbenchError
from workbench.store.tenancy import ADMIN, Caller, token_hash

if TYPE_CHECKING:
    from service.api.seam import ToolTarget
    from workbench.config import Settings
    from workbench.store.tenancy import Tenancy

CALLER_KEY = "workbench.caller"
NIL_UUID = "00000000-0000-0000-0000-000000000000"  # names nothing the service hands out
EXEMPT_PATHS = frozenset({"/health"})
TOKEN_SOURCES = "SVC_KNOWLEDGE_API_TOKEN or a token of `workbench tokens add`"
log = logging.getLogger("service.access")


# --- who is calling ------------------------------------------------------------------------
_NEVER = -1e18  # the expiry of an answer never read from the store


class TokenResolver:
    """Bearer tokens → callers, remembered for ``ttl`` seconds (thread-safe, bounded). While
    the store cannot be read (an outage), the last answer read for a token, or for whether
    any token exists, stands; what was never read is refused (503)."""

    def __init__(
        self,
        tenancy: Tenancy | None,
        admin_token: str = "",
        ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ):
        self.tenancy = tenancy
        self.ttl = ttl
        self.clock = clock
        self.max_entries = max_entries
        self._admin = admin_token
        self._admin_stored: bool | None = None  # whether the store knows the admin token
        self._cache: OrderedDict[str, tuple[float, Caller | None]] = OrderedDict()
        self._any: tuple[float, bool] = (_NEVER, False)
        self._lock = threading.Lock()

    def required(self) -> bool:
        """Whether a request needs a token: the admin token is set, or the store holds any."""
        known = self.required_known()
        if known is not None:
            return known
        assert self.tenancy is not None  # known is None: only the store can tell
        try:
            value = self.tenancy.any_tokens()
        except Exception:
            if self._any[0] == _NEVER:  # never read: only the store can tell
                raise
            return self._any[1]  # the store is away: the last answer it gave stands
        self._any = (self.clock() + self.ttl, value)
        return value

    def required_known(self) -> bool | None:
        """:meth:`required` without I/O; None when only the store can tell."""
        if self._admin:
            return True
        if self.tenancy is None:
            return False
        expiry, value = self._any
        return value if self.clock() < expiry else None

    def _is_admin(self, token: str) -> bool:
        return bool(self._admin) and hmac.compare_digest(token.encode(), self._admin.encode())

    def cached(self, token: str) -> tuple[bool, Caller | None]:
        """``(True, caller)`` when :meth:`resolve` can answer without I/O."""
        if self._is_admin(token) and self._admin_stored is False:
            return True, ADMIN
        if self.tenancy is None:
            return True, None
        with self._lock:
            hit = self._cache.get(token_hash(token))
        if hit is not None and self.clock() < hit[0]:
            return True, hit[1]
        return False, None

    def resolve(self, token: str) -> Caller | None:
        if self._is_admin(token) and not self._admin_is_stored(token):
            return ADMIN
        if self.tenancy is None or not token:
            return None
        key = token_hash(token)
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]
        try:
            caller = self.tenancy.caller(token)
        except Exception:
            if hit is None:  # never resolved: only the store can tell
                raise
            return hit[1]  # the store is away: the last answer it gave stands
        with self._lock:
            self._cache[key] = (now + self.ttl, caller)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return caller

    def _admin_is_stored(self, token: str) -> bool:
        """Whether the store knows the admin token as one of its own: then it is never the
        admin token (a scoped token handed to a process as its admin secret, e.g. a client's
        environment) but resolves to its own scope. Read once."""
        if self._admin_stored is None:
            known = self.tenancy is not None and self.tenancy.caller(token) is not None
            if known:
                log.error(
                    "SVC_KNOWLEDGE_API_TOKEN is a token of the store (`workbench tokens`): it "
                    "is not taken as the admin token, only in its own scope"
                )
            self._admin_stored = known
        return self._admin_stored

    def known(self, token: bytes) -> bool:
        """Whether ``token`` is a valid one already resolved (no I/O: for the rate limit)."""
        text = token.decode("latin-1")
        if self._is_admin(text) and self._admin_stored is not True:  # a bucket, not a grant
            return True
        with self._lock:
            hit = self._cache.get(token_hash(text))
        return hit is not None and hit[1] is not None and self.clock() < hit[0]


def _bearer(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else ""
    return None


class ScopedAuthMiddleware:
    """401 without a valid token when tokens exist; the caller into ``scope[CALLER_KEY]``."""

    def __init__(self, app: ASGIApp, resolver: TokenResolver, exempt: Iterable[str] = EXEMPT_PATHS):
        self.app = app
        self.resolver = resolver
        self._exempt = frozenset(exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in self._exempt:
            given = _bearer(scope)
            try:
                required, caller = await self._check(given)
            except Exception as exc:  # noqa: BLE001 - the store failed: refuse, never let in
                log.warning("cannot check the bearer token: %s", exc)
                # the kind (store_unavailable while the server is down) and when to retry;
                # the store's own message (its address) is for the log, not an unknown caller
                kind = exc.kind if isinstance(exc, StoreError) else "store_error"
                message = "cannot check the bearer token: the store failed"
                await send_error(send, 503, kind, message, retry_headers(exc))
                return
            if required:
                if caller is None:
                    message = bearer_refusal(given is not None, TOKEN_SOURCES)
                    await send_error(send, 401, "unauthorized", message, UNAUTHORIZED_HEADERS)
                    return
                scope[CALLER_KEY] = caller
        await self.app(scope, receive, send)

    async def _check(self, given: str | None) -> tuple[bool, Caller | None]:
        """Whether a token is needed, and whose ``given`` is (a thread only for the store)."""
        required = self.resolver.required_known()
        if required is None:
            required = await anyio.to_thread.run_sync(self.resolver.required)
        if not required or not given:
            return required, None
        done, caller = self.resolver.cached(given)
        if not done:
            caller = await anyio.to_thread.run_sync(self.resolver.resolve, given)
        return required, caller


def tenancy_of(workbench: ToolTarget) -> Tenancy | None:
    """The workbench's :class:`~workbench.store.tenancy.Tenancy`; None for a stand-in (a
    remote service's tools, a database that could not be opened), whose ``__getattr__``
    answers every name."""
    return vars(workbench).get("tenancy") if hasattr(workbench, "__dict__") else None


def caller_of(scope: Any) -> Caller | None:
    return scope.get(CALLER_KEY) if scope is not None else None


# --- what the caller may do ----------------------------------------------------------------
def guarded_call(
    tool: Any, workbench: ToolTarget, args: Any, caller: Caller | None
) -> dict[str, Any]:
    """Call ``tool`` with validated ``args`` within ``caller``'s scope (None: every group)."""
    try:
        args = scoped(tool, workbench, args, caller)
        result = tool.call(workbench, args)
    except NotFound as exc:
        _audit(tool, workbench, args, caller, exc.kind)
        raise _hidden(args) if _limited(caller) and _uuids(args) else exc from None
    except WorkbenchError as exc:
        _audit(tool, workbench, args, caller, exc.kind)
        raise
    except Exception:
        _audit(tool, workbench, args, caller, "internal_error")
        raise
    _audit(tool, workbench, args, caller, "ok")
    if _limited(caller):
        result = _visible(result, caller)
    answer: dict[str, Any] = _covered(tool, workbench, args, result)
    return answer


def _limited(caller: Caller | None) -> TypeGuard[Caller]:
    return caller is not None and not caller.admin


def scoped(tool: Any, workbench: ToolTarget, args: Any, caller: Caller | None) -> Any:
    """``args`` as ``caller`` may send them (an omitted group list narrowed to its groups),
    or :class:`Forbidden` / :class:`NotFound`."""
    if not _limited(caller):
        return args
    who = f"token {caller.name!r}"
    if tool.admin:
        raise Forbidden(f"{tool.name} needs an admin token; {who} is not one")
    if caller.read_only and not tool.read_only:
        raise Forbidden(f"{who} is read-only; {tool.name} writes")
    if not caller.groups:
        raise Forbidden(f"{who} may use no group")
    fields = type(args).model_fields
    update: dict[str, Any] = {}
    if "group_ids" in fields:
        if args.group_ids:
            _check_groups(args.group_ids, caller, tool)
        else:
            update["group_ids"] = sorted(caller.groups)
    if "group_id" in fields:
        group = args.group_id
        if group is None and tool.groups_omitted == "default":
            # a limited caller exists only in the local service: its target is the Workbench
            settings = cast("Settings", workbench.settings)
            group = update["group_id"] = settings.default_group_id
        if group is not None:
            _check_groups([group], caller, tool)
        elif not _uuids(args):
            raise Forbidden(
                f"{tool.name} of every group needs an admin token; {who} may name a group_id"
            )
    _check_groups(_line_groups(args), caller, tool)
    for name, value in _uuid_fields(args):
        if tool.name == "add_memory":  # names the new episode: scoped by the core (issue 55)
            continue
        if isinstance(value, list):  # a list: another group's uuids count as missing ones
            # (a list left empty names the nil uuid: an empty list would mean "all")
            update[name] = [u for u in value if _ours(workbench, caller, u)] or [NIL_UUID]
        elif not _ours(workbench, caller, value):
            raise _hidden(args)
    return args.model_copy(update=update) if update else args


def _ours(workbench: ToolTarget, caller: Caller, uuid: str) -> bool:
    """Whether ``uuid`` names nothing, or an item of a group ``caller`` may use."""
    tenancy = cast("Tenancy", workbench.tenancy)  # the local service's, as in scoped()
    group = tenancy.group_of(uuid)
    return group is None or caller.may_use(group)


def _check_groups(groups: Iterable[str], caller: Caller, tool: Any) -> None:
    outside = sorted({g for g in groups if not caller.may_use(g)})
    if outside:
        raise Forbidden(
            f"token {caller.name!r} may not use group {', '.join(outside)} ({tool.name}); "
            f"its groups: {', '.join(sorted(caller.groups or ()))}"
        )


def _line_groups(args: Any) -> list[str]:
    """The groups an import's lines name (lines that are not JSON objects name none)."""
    groups = []
    for line in getattr(args, "lines", None) or ():
        if isinstance(line, str):
            try:
                line = json.loads(line)
            except ValueError:
                continue
        if isinstance(line, dict) and isinstance(line.get("group_id"), str):
            groups.append(line["group_id"])
    return groups


def _uuid_fields(args: Any) -> list[tuple[str, Any]]:
    """The uuid arguments given (fields ``uuid``, ``*_uuid``, ``*_uuids``)."""
    return [
        (name, getattr(args, name))
        for name in type(args).model_fields
        if getattr(args, name) is not None
        and (name == "uuid" or name.endswith(("_uuid", "_uuids")))
    ]


def _uuids(args: Any) -> list[str]:
    found: list[str] = []
    for _, value in _uuid_fields(args):
        found.extend(value if isinstance(value, list) else [value])
    return found


def _hidden(args: Any) -> NotFound:
    """The same answer for an item of another group as for no item at all."""
    return NotFound(f"nothing with uuid {', '.join(_uuids(args))} in the groups of this token")


def _visible(value: Any, caller: Caller) -> Any:
    """``value`` without the rows (dicts with a ``group_id``) of groups ``caller`` may not use."""
    if isinstance(value, dict):
        return {k: _visible(v, caller) for k, v in value.items()}
    if isinstance(value, list):
        return [
            _visible(v, caller)
            for v in value
            if not (isinstance(v, dict) and "group_id" in v and not caller.may_use(v["group_id"]))
        ]
    return value


def _covered(tool: Any, workbench: ToolTarget, args: Any, result: Any) -> Any:
    """A read over ``group_ids`` says which groups it covered."""
    if not (tool.read_only and "group_ids" in type(args).model_fields):
        return result
    if not isinstance(result, dict) or "groups" in result:
        return result
    groups = args.group_ids
    if not groups:  # every group: those the in-memory indexes hold (no store read)
        search = getattr(workbench, "search", None)
        if search is not None and hasattr(search, "indexes"):
            groups = search.indexes.groups()
        elif (tenancy := tenancy_of(workbench)) is not None:
            groups = tenancy.group_names()
        else:
            return result
    return {**result, "groups": sorted(groups)}


# --- the audit trail -----------------------------------------------------------------------
def _audit(
    tool: Any, workbench: ToolTarget, args: Any, caller: Caller | None, outcome: str
) -> None:
    tenancy = tenancy_of(workbench)
    if not (tool.audited or tool.destructive) or tenancy is None:
        return
    groups: list[str] = []
    for name in ("group_id", "group_ids", "groups"):
        value = getattr(args, name, None)
        groups.extend(value if isinstance(value, list) else [value] if value else [])
    groups.extend(_line_groups(args))
    subjects = list(_uuids(args))
    if tool.name.endswith("_token"):
        subjects.append(f"token:{args.name}")
    try:
        tenancy.audit(
            caller.name if caller else "local",
            tool.name,
            list(dict.fromkeys(groups)),
            subjects,
            outcome,
        )
    except WorkbenchError as exc:  # the call's own answer matters more than its trail
        log.error("audit_log: could not record %s by %s: %s", tool.name, caller, exc)

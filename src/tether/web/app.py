"""The web app: two pages, a JSON API, and each session's event stream.

Pages: ``/`` (the sessions) and ``/s/{session_id}`` (one session), plain
files from ``static/``. The API is under ``/api/`` and its OpenAPI document is
``/api/openapi.json``, generated from the ``---`` part of each endpoint's
docstring (Starlette's ``SchemaGenerator``).

**The event stream** (``GET /api/sessions/{id}/events``, Server-Sent
Events) is :meth:`~tether.front.follow.SessionViews.follow` on the wire. Each
``events`` message is a JSON array of log records ``{type, seq, time,
data}`` — a ``tool/call`` and a ``tool/result`` also carry ``shown``, how
the tool presents its calls (:class:`~tether.tools.presentation.ToolShown`),
and so does each open question — with ``id:`` the seq of its last record, so a browser that
reconnects sends ``Last-Event-ID`` and gets exactly what follows it (a
script may give ``?after=SEQ`` instead). ``state`` messages (no ``id``)
carry what is not in the log: the open permission questions, whether the
agent is live here, and the progress of its running commands (``progress``:
``{call_id, name, elapsed, tail}`` each, sent again as it changes, a few
times a second at most; a call's ``tool/result`` ends it). A record is
encoded once, however many tabs follow its session at once
(:class:`EncodedLogs` keeps the latest records encoded, not a log's whole
history). A tab that goes away ends its follower at once; the session and
its turn go on.

Errors are JSON ``{"error": "..."}`` with a status that says which: 400 a bad
value (a session id is checked with ``validate_session_id``, so no path
can be smuggled in one), 404 an unknown session or task, 409 a session live
in another process (``holder`` is ``{host, pid}``: the host on PostgreSQL,
``null`` otherwise), 413 a prompt over :data:`MAX_PROMPT_BYTES`, 503 the app
shutting down or storage refusing what was submitted (a prompt refused so
never runs).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from tether.agent.errors import NotStoredError
from tether.front.diffs import patch_files
from tether.front.outcomes import turn_outcome
from tether.front.rewind import (
    WORKSPACES,
    OutsideChangesError,
    RewindError,
    Workspaces,
    changes_since,
    fork_session,
)
from tether.front.rewind_commands import (
    REWIND_CHOICES,
    RewindChoice,
    RewindDone,
    forked_lines,
    rewind_live,
    rewind_stored,
)
from tether.frozen import thaw
from tether.persist.backends.errors import (
    InvalidSessionIdError,
    LogStoreError,
    SessionNotFoundError,
    storage_failure,
)
from tether.persist.backends.lease import SessionLeasedError
from tether.persist.backends.records import validate_session_id
from tether.persist.cluster import CLUSTER
from tether.persist.follow import BATCH
from tether.persist.service import PERSISTENCE
from tether.rewind.plan import turn_points
from tether.rewind.store import SnapshotError
from tether.session import AssistantMessageEvent, ToolCallEvent, ToolResultEvent, TurnEnd
from tether.session.elicitation import ElicitationCompleted
from tether.session.errors import SessionError
from tether.session.model import MODEL_LABEL, session_model, start_model
from tether.session.prompt_cut import PromptCut, prompt_cut_notice
from tether.session.settings import MODE_OPTION, MODEL_OPTION, SANDBOX_OPTION, ConfigChanged
from tether.session.store import SESSIONS, SessionConflictError
from tether.shell.sandbox import SANDBOX, SandboxMode
from tether.tools.permission import Mode
from tether.tools.registry import TOOLS, Shown, shown_in
from tether.web.hub import (
    HubClosedError,
    LiveElsewhereError,
    NotAttachedError,
    UnknownSessionError,
    UnknownTaskError,
    WebError,
    WebHub,
)
from tether.web.render import answer_html, call_diffs
from tether.web.security import Guard

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.llm.catalog import ModelCatalog
    from tether.persist.backends.base import SessionSummary
    from tether.persist.backends.lease import Holder
    from tether.persist.cluster import Cluster
    from tether.persist.service import Persistence
    from tether.runtime import Context
    from tether.session import Event, Session
    from tether.web.listing import ListingIndex

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")

T = TypeVar("T")

MAX_PROMPT_BYTES = 256 * 1024
"""The largest prompt request body accepted (413 beyond)."""

ENCODED_KEPT = 4 * BATCH
"""Records each followed session keeps encoded for its followers (the latest read)."""

BATCH_WINDOW = 0.008
"""Seconds a live batch gathers events before it is sent (see :meth:`SessionViews.follow`):
with many tabs, far fewer writes for a few milliseconds of latency."""

STATES = ("live", "idle", "elsewhere")
"""A listed session's state: live here, live nowhere, live in another process or host."""


def _largest(key: str) -> Callable[[dict[str, object]], tuple[bool, float]]:
    def order(row: dict[str, object]) -> tuple[bool, float]:
        value = row.get(key)
        if isinstance(value, dict):  # the context: its tokens in use
            value = value.get("used")
        return (value is None, -float(value) if isinstance(value, int | float) else 0.0)

    return order


SORTS: dict[str, Callable[[dict[str, object]], tuple[bool, float]]] = {
    "activity": _largest("last_activity"),
    "cost": _largest("cost"),
    "context": _largest("context"),
    "turns": _largest("turns"),
}
"""How a listing may be sorted: largest first, rows without the figure last."""

RETRY_MS = 2000
"""How long a browser waits before it reconnects a stream that ended."""

_TASK_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")

OPENAPI_INFO: dict[str, object] = {
    "openapi": "3.0.0",
    "info": {
        "title": "tether web",
        "version": "1",
        "description": "Sessions of a running `tether web`: list, create, prompt, stop, "
        "answer permission questions, background tasks, and the live event stream. "
        "Every request needs the access token: `Authorization: Bearer <token>`.",
    },
}


class ApiError(Exception):
    """A request refused with ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


class EncodedLogs:
    """Log records encoded once for every follower of a session (by session, by seq).

    Each session keeps the `ENCODED_KEPT` records encoded last: the tabs
    that follow it live share those, while one catching up with an old part
    of a long log encodes what it reads. A session's entries are dropped
    when it has no follower left.
    """

    def __init__(self) -> None:
        self._records: dict[str, OrderedDict[int, bytes]] = {}
        self._users: dict[str, int] = {}

    def enter(self, session_id: str) -> None:
        self._users[session_id] = self._users.get(session_id, 0) + 1

    def leave(self, session_id: str) -> None:
        left = self._users[session_id] - 1
        if left:
            self._users[session_id] = left
        else:
            del self._users[session_id]
            self._records.pop(session_id, None)

    def message(
        self,
        session_id: str,
        events: Sequence[Event],
        shown: Shown | None = None,
        cwd: str | None = None,
    ) -> bytes:
        """One SSE ``events`` message holding ``events`` (contiguous, seq order); a tool
        call or result carries ``shown``, its tool's presentation (by default as a
        tool that declares nothing), and a call that changes a file its ``diffs``
        (located in the file under ``cwd`` when it is found there)."""
        records = self._records.setdefault(session_id, OrderedDict())
        shown_of = shown if shown is not None else shown_in(None)
        parts: list[bytes] = []
        for event in events:
            encoded = records.get(event.seq)
            if encoded is None:
                encoded = records[event.seq] = msgspec.json.encode(_record(event, shown_of, cwd))
            parts.append(encoded)
        for _ in range(len(records) - ENCODED_KEPT):
            records.popitem(last=False)  # the one encoded first
        last = events[-1].seq
        return b"id: %d\nevent: events\ndata: [%b]\n\n" % (last, b",".join(parts))


def _record(event: Event, shown: Shown, cwd: str | None) -> dict[str, object]:
    """``event``'s record as the page reads it: a tool call or result with ``shown``,
    a call that changes a file with its ``diffs`` (:func:`~tether.web.render.call_diffs`),
    an answer with its Markdown as sanitized ``html`` (:mod:`tether.web.markdown`), a
    turn's end with its ``outcome`` as the terminal says it (what failed, what to do),
    a prompt the model server cut or a URL question done with at its server's word with
    the ``notice`` the terminal shows for it."""
    record = event.to_record()
    payload = event.payload
    if isinstance(payload, ToolCallEvent | ToolResultEvent):
        record["shown"] = tool_shown = shown(payload.name)
    if isinstance(payload, TurnEnd):
        record["outcome"] = turn_outcome(payload.reason)
    if isinstance(payload, PromptCut):
        record["notice"] = prompt_cut_notice(event.data)
    if isinstance(payload, ElicitationCompleted):
        record["notice"] = payload.describe()
    if isinstance(payload, AssistantMessageEvent) and (html := answer_html(payload)):
        record["html"] = html
    if isinstance(payload, ToolCallEvent):
        arguments = thaw(payload.arguments)
        if isinstance(arguments, dict) and (diffs := call_diffs(tool_shown, arguments, cwd)):
            record["diffs"] = diffs
    return record


def build_app(
    ctx: Context,
    hub: WebHub,
    token: str,
    *,
    default_model: str | None,
    more_routes: Sequence[BaseRoute] = (),
) -> Guard:
    """The app for ``hub``, behind the token guard (see :mod:`tether.web.security`);
    ``default_model`` is what a new session runs when it names none; ``more_routes``
    are served beside the app's own, behind the same guard (``tether web``'s ``/acp``)."""
    api = Api(ctx, hub, default_model)
    routes: list[BaseRoute] = [
        *more_routes,
        Route("/", api.page_sessions, include_in_schema=False),
        Route("/s/{session_id}", api.page_session, include_in_schema=False),
        Route("/api/openapi.json", api.openapi, include_in_schema=False),
        Route("/api/models", api.models),
        Route("/api/sessions", api.list_sessions, methods=["GET"]),
        Route("/api/sessions", api.create_session, methods=["POST"]),
        Route("/api/sessions/{session_id}", api.get_session),
        Route("/api/sessions/{session_id}/events", api.events),
        Route("/api/sessions/{session_id}/usage", api.usage),
        Route("/api/sessions/{session_id}/prompt", api.prompt, methods=["POST"]),
        Route("/api/sessions/{session_id}/commands", api.commands),
        Route("/api/sessions/{session_id}/resources", api.resources),
        Route("/api/sessions/{session_id}/cancel", api.cancel, methods=["POST"]),
        Route("/api/sessions/{session_id}/config", api.configure, methods=["POST"]),
        Route("/api/sessions/{session_id}/questions", api.questions),
        Route(
            "/api/sessions/{session_id}/questions/{question_id}",
            api.answer,
            methods=["POST"],
        ),
        Route(
            "/api/sessions/{session_id}/elicitations/{elicitation_id}",
            api.answer_elicitation,
            methods=["POST"],
        ),
        Route("/api/sessions/{session_id}/turns", api.turns),
        Route("/api/sessions/{session_id}/diff", api.diff),
        Route("/api/sessions/{session_id}/rewind", api.rewind, methods=["POST"]),
        Route("/api/sessions/{session_id}/fork", api.fork, methods=["POST"]),
        Route("/api/sessions/{session_id}/tasks", api.tasks),
        Route("/api/sessions/{session_id}/tasks/{task_id}", api.task),
        Route("/api/sessions/{session_id}/tasks/{task_id}/kill", api.kill, methods=["POST"]),
        Route("/static/highlight.css", api.highlight_css, include_in_schema=False),
        Route("/api/runs", api.submit_run, methods=["POST"]),
        Route("/api/runs/{session_id}", api.get_run),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
    )
    return Guard(app, token)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse({"error": str(exc), **exc.extra}, status_code=exc.status)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": "internal error (see the server's log)"}, status_code=500)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code)


class Api:
    """The endpoints (their OpenAPI descriptions are in their docstrings)."""

    def __init__(self, ctx: Context, hub: WebHub, default_model: str | None) -> None:
        self._ctx = ctx
        self._hub = hub
        self._default_model = default_model
        self._encoded = EncodedLogs()
        self._listing: ListingIndex | None = None
        """Each listed session's context, cost and prompts (made by the first listing)."""
        self._listing_lock = asyncio.Lock()

    # -- pages ---------------------------------------------------------------------------

    async def page_sessions(self, request: Request) -> Response:
        return FileResponse(STATIC / "sessions.html")

    async def page_session(self, request: Request) -> Response:
        _session_id(request)
        return FileResponse(STATIC / "session.html")

    async def highlight_css(self, request: Request) -> Response:
        """The stylesheet of highlighted code in answers (made by Pygments)."""
        from tether.web.markdown import highlight_css

        return Response(highlight_css(), media_type="text/css")

    async def openapi(self, request: Request) -> Response:
        # Imported here: no page needs it, and start-up is a measured target.
        from starlette.schemas import SchemaGenerator

        schema = SchemaGenerator(OPENAPI_INFO).get_schema(routes=request.app.routes)
        return JSONResponse(schema)

    # -- sessions --------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        """
        summary: The model providers configured here, and the default model and mode.
        responses:
          200: {description: "{providers: [str], default_model: str, modes: [str], default_mode:
            str, sandbox_modes: [str], default_sandbox: str or null, cwd: str (the server's
            working directory)}"}
        """
        from tether.llm.service import LLM

        llm = self._ctx.get(LLM)
        providers = [] if llm is None else llm.providers()
        return JSONResponse(
            {
                "providers": providers,
                "default_model": self._default_model,
                "modes": [mode.value for mode in Mode],
                "default_mode": self._hub.config.mode.value,
                **self._sandbox_modes(),
                "cwd": os.getcwd(),
            }
        )

    def _sandbox_modes(self) -> dict[str, object]:
        """The sandbox modes a new session may take and the default, when there is a sandbox."""
        sandbox = self._ctx.get(SANDBOX)
        if sandbox is None:
            return {"sandbox_modes": [], "default_sandbox": None}
        modes = [mode.value for mode in SandboxMode]
        return {"sandbox_modes": modes, "default_sandbox": sandbox.settings.mode.value}

    def _sandbox_of(self, options: Mapping[str, str]) -> dict[str, str] | None:
        """A session's sandbox as shown: its mode and network in words; ``None`` without one."""
        sandbox = self._ctx.get(SANDBOX)
        if sandbox is None:
            return None
        return {
            "mode": sandbox.mode_for(options).value,
            "network": sandbox.network_summary(options),
        }

    async def list_sessions(self, request: Request) -> Response:
        """
        summary: Stored and live sessions, filtered, sorted (most recently active first).
        parameters:
          - {name: q, in: query, schema: {type: string}, description: "title, id, directory
              or a prompt holds it (case ignored)"}
          - {name: cwd, in: query, schema: {type: string}, description: "only this directory"}
          - {name: state, in: query, schema: {type: string, enum: [live, idle, elsewhere]},
              description: "live here, live nowhere, or live in another process or host"}
          - {name: live, in: query, schema: {type: boolean}, description: "only live ones"}
          - {name: sort, in: query, schema: {type: string, enum: [activity, cost, context,
              turns]}, description: "largest first; default activity"}
          - {name: limit, in: query, schema: {type: integer}}
        responses:
          200: {description: "{sessions: [{id, title, cwd, model, last_activity, turns,
            state: live|idle|elsewhere, live: here|elsewhere|null, holder: {host, pid}|null,
            running, parent, context: {used, window}|null, cost, currency}], total (rows
            matching, before the limit), directories: [str], pending (sessions whose figures
            are not folded yet: asked again, they are)}"}
          400: {description: a bad state, sort or limit}
        """
        needle = request.query_params.get("q", "").casefold()
        directory = request.query_params.get("cwd") or None
        state = request.query_params.get("state") or None
        if state not in (None, *STATES):
            raise ApiError(400, f"state must be one of {', '.join(STATES)}, got {state!r}")
        if request.query_params.get("live") in ("1", "true"):
            state = state or "live-any"
        sort = request.query_params.get("sort") or "activity"
        if sort not in SORTS:
            raise ApiError(400, f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        limit = _int_param(request, "limit", default=200, low=1)
        rows, prompts, pending = await self._rows()
        directories = sorted({str(row["cwd"]) for row in rows if row["cwd"]})
        if directory is not None:
            rows = [row for row in rows if row["cwd"] == directory]
        if state == "live-any":
            rows = [row for row in rows if row["live"] is not None]
        elif state is not None:
            rows = [row for row in rows if row["state"] == state]
        if needle:
            rows = [row for row in rows if _matches(row, prompts.get(str(row["id"]), ""), needle)]
        if sort != "activity":
            rows.sort(key=SORTS[sort])  # stable: ties stay most recently active first
        return JSONResponse(
            {
                "sessions": rows[:limit],
                "total": len(rows),
                "directories": directories,
                "pending": pending,
            }
        )

    async def _rows(self) -> tuple[list[dict[str, object]], dict[str, str], int]:
        """Every session's row, most recently active first; the prompts of each (for the
        search); how many sessions' figures are still to fold."""
        persistence = self._ctx.get(PERSISTENCE)
        summaries: list[SessionSummary] = [] if persistence is None else await persistence.list()
        rows: dict[str, dict[str, object]] = {}
        readable = [s for s in summaries if s.error is None]
        holders = await self._holders(persistence, readable)
        for summary in readable:
            holder = holders.get(summary.id)
            rows[summary.id] = {
                "id": summary.id,
                "title": summary.title,
                "cwd": summary.cwd,
                "model": summary.meta.get(MODEL_LABEL),
                "last_activity": summary.last_activity,
                "turns": summary.turn_count,
                "state": "idle" if holder is None else "elsewhere",
                "live": None if holder is None else "elsewhere",
                "holder": None if holder is None else holder.to_json(),
                "running": False,
                "parent": summary.delegator,
            }
        for agent in self._hub.live_agents():
            row = rows.get(agent.id) or {
                "id": agent.id,
                "title": None,
                "cwd": agent.session.header.cwd,
                "turns": 0,
                "parent": agent.session.header.delegator,
            }
            events = agent.session.events
            row.update(
                state="live",
                live="here",
                holder=self._hub.here().to_json(),
                running=agent.session.open_turn is not None,
                model=self._model_of(agent.session),
                last_activity=events[-1].time if events else agent.session.header.created_at,
            )
            rows[agent.id] = row
        prompts, pending = await self._figures(readable, rows)
        ordered = sorted(rows.values(), key=lambda row: -float(row["last_activity"] or 0))  # type: ignore[arg-type]
        return ordered, prompts, pending

    async def _figures(
        self, summaries: Sequence[SessionSummary], rows: dict[str, dict[str, object]]
    ) -> tuple[dict[str, str], int]:
        """Add each row's context and cost (:mod:`tether.web.listing`), folding the
        sessions that changed since the last listing within its time budget; return
        each session's prompts and how many are left to fold."""
        from tether.web.listing import COUNTED, Figures, ListingIndex, Stamp, decode_counted, fold

        if self._listing is None:
            self._listing = ListingIndex()
        index, catalog = self._listing, self._catalog()
        stamps: dict[str, Stamp] = {
            s.id: (s.turn_count, s.last_activity, s.created_at) for s in summaries
        }
        for agent in self._hub.live_agents():  # in memory: folded at once
            session = agent.session
            stamp = stamps[agent.id] = ("here", len(session.events))
            if index.get(agent.id, stamp) is None:
                counted = session.events.of_types(COUNTED)
                index.put(agent.id, stamp, fold(counted, catalog, self._model_of(session, at=0)))
        models = {s.id: start_model(s.meta, self._default_model) for s in summaries}
        stale = [(sid, stamp) for sid, stamp in stamps.items() if index.get(sid, stamp) is None]

        async def read(session_id: str) -> Figures | None:
            persistence = self._ctx.get(PERSISTENCE)
            if persistence is None:
                return None
            try:
                stored = await persistence.events_after(session_id, -1)
                return fold(decode_counted(stored), catalog, models[session_id])
            except (LogStoreError, SessionError) as exc:
                log.warning("session %s: no figures for the listing: %s", session_id, exc)
                return None

        async with self._listing_lock:
            pending = await index.refresh(stale, read)
        index.keep_only(stamps)
        prompts: dict[str, str] = {}
        for session_id, row in rows.items():
            figures = index.get(session_id, stamps[session_id]) or Figures()
            row.update(figures.to_json())
            prompts[session_id] = figures.prompts
        return prompts, pending

    def _catalog(self) -> ModelCatalog:
        from tether.llm.catalog import ModelCatalog
        from tether.llm.service import LLM

        llm = self._ctx.get(LLM)
        return ModelCatalog() if llm is None else llm.catalog

    async def _holders(
        self, persistence: Persistence | None, summaries: Sequence[SessionSummary]
    ) -> dict[str, Holder]:
        """Who has each listed session live elsewhere: as listed where hosts share
        sessions (PostgreSQL lists holders), else asked of storage (all in one go)."""
        if persistence is None:
            return {}
        if self._ctx.get(CLUSTER) is not None:
            return {s.id: s.holder for s in summaries if s.holder is not None}
        held = {s.id: s.holder for s in summaries if s.holder is not None}
        ask = [s.id for s in summaries if s.holder is None and self._hub.live_agent(s.id) is None]
        return {**held, **await persistence.holders(ask)}

    async def create_session(self, request: Request) -> Response:
        """
        summary: Create a session (owned by this server) and return its id.
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [cwd]
                properties:
                  cwd: {type: string, description: an existing directory (absolute)}
                  model: {type: string, description: "PROVIDER:MODEL; default: the configured one"}
                  mode: {type: string, enum: [ask, auto]}
                  sandbox:
                    type: string
                    enum: [read-only, workspace-write, full-access]
                    description: "default: the sandbox setting's mode"
        responses:
          201: {description: "{id}"}
          400: {description: a bad cwd, model, mode or sandbox}
          503: {description: "the session could not be stored (it was not created)"}
        """
        body = await _json_body(request, limit=64 * 1024)
        cwd = body.get("cwd")
        if not isinstance(cwd, str) or not await asyncio.to_thread(_is_dir, cwd):
            raise ApiError(400, f"cwd must be an existing absolute directory, got {cwd!r}")
        model = body.get("model") or None
        if model is not None:
            _check_model(self._ctx, model)
        mode_given = body.get("mode") or None
        try:
            mode = Mode(mode_given) if mode_given is not None else None
        except ValueError:
            raise ApiError(400, f"mode must be ask or auto, got {mode_given!r}") from None
        sandbox = self._sandbox_choice(body.get("sandbox") or None)
        try:
            agent = await self._hub.create(_normal(cwd), model=model, mode=mode, sandbox=sandbox)
        except (HubClosedError, NotStoredError) as exc:
            raise ApiError(503, str(exc)) from None
        return JSONResponse({"id": agent.id}, status_code=201)

    def _sandbox_choice(self, given: object) -> SandboxMode | None:
        """The sandbox mode a new session asks for (``None``: the setting's).

        Raises:
            ApiError: 400, not a mode, or no sandbox here to apply it.
        """
        if given is None:
            return None
        if self._ctx.get(SANDBOX) is None:
            raise ApiError(400, "sandbox cannot be chosen: the sandbox plugin is not mounted")
        known = [mode.value for mode in SandboxMode]
        if given not in known:
            raise ApiError(400, f"sandbox must be one of {', '.join(known)}, got {given!r}")
        return SandboxMode(given)

    async def submit_run(self, request: Request) -> Response:
        """
        summary: Queue a run for `tether worker` processes (PostgreSQL) and return its
          session id at once; follow it as any session once a worker stored it.
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [task, cwd]
                properties:
                  task: {type: string}
                  cwd: {type: string, description: "absolute; on the worker's host"}
                  model: {type: string, description: "PROVIDER:MODEL; default: the worker's"}
                  queue: {type: string, description: "default: default"}
                  priority: {type: integer, description: "higher runs first; default 0"}
                  max_attempts: {type: integer, minimum: 1, description: "default 3"}
        responses:
          201: {description: "{id, state: queued}"}
          400: {description: a bad task, cwd, model, queue, priority or max_attempts}
          404: {description: "no run queue here (sessions are not kept in PostgreSQL)"}
          503: {description: "the queue could not store it (it was not queued)"}
        """
        body = await _json_body(request, limit=MAX_PROMPT_BYTES)
        submit, cluster = _run_request(body), self._cluster()
        try:
            run = await cluster.submit(**submit)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        except Exception as exc:  # the database: said in one line, nothing queued
            log.warning("a run could not be queued: %s", exc)
            raise ApiError(503, f"the run could not be queued: {storage_failure(exc)}") from None
        return JSONResponse({"id": run.session_id, "state": "queued"}, status_code=201)

    async def get_run(self, request: Request) -> Response:
        """
        summary: A submitted run as stored (PostgreSQL).
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{id, task, cwd, model, queue, priority, state, attempts,
            max_attempts, worker, submitted_at, outcome}"}
          404: {description: "no such run, or no run queue here"}
        """
        session_id = _session_id(request)
        run = await asyncio.to_thread(self._cluster().runs.get, session_id)
        if run is None:
            raise ApiError(404, f"no run {session_id}")
        record = msgspec.to_builtins(run)
        record["id"] = record.pop("session_id")
        return JSONResponse(record)

    def _cluster(self) -> Cluster:
        cluster = self._ctx.get(CLUSTER)
        if cluster is None:
            raise ApiError(404, "no run queue here: it lives in PostgreSQL (TETHER_DATABASE_URL)")
        return cluster

    async def get_session(self, request: Request) -> Response:
        """
        summary: One session's header, settings and where it is live.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{id, cwd, title, model, mode, sandbox: {mode, network} or null,
            live, holder, running, parent, children, events}"}
          404: {description: no such session}
        """
        session_id = _session_id(request)
        agent = self._hub.live_agent(session_id)
        session = agent.session if agent is not None else await self._load(session_id)
        holder = None if agent is not None else await self._hub.holder(session_id)
        settings = session.settings.options
        persistence = self._ctx.get(PERSISTENCE)
        children = []
        title = None
        if persistence is not None:
            for summary in await persistence.list():
                delegation = summary.delegation
                if delegation is not None and summary.delegator == session_id:
                    children.append(
                        {
                            "id": summary.id,
                            "task": delegation.task,
                            "title": summary.title,
                            "call": delegation.call,
                        }
                    )
                if summary.id == session_id:
                    title = summary.title
        return JSONResponse(
            {
                "id": session_id,
                "cwd": session.header.cwd,
                "title": title,
                "model": self._model_of(session),
                "mode": settings.get(MODE_OPTION, self._hub.config.mode.value),
                "sandbox": self._sandbox_of(settings),
                "live": "here" if agent is not None else (None if holder is None else "elsewhere"),
                "holder": self._hub.here().to_json()
                if agent is not None
                else (None if holder is None else holder.to_json()),
                "running": session.open_turn is not None and agent is not None,
                "parent": session.header.delegator,
                "children": children,
                "events": len(session.events),
            }
        )

    async def usage(self, request: Request) -> Response:
        """
        summary: Tokens and cost of each turn (cost only where the model's prices are set).
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{turns: [{turn, input_tokens, output_tokens, cost, currency}],
            context: {used, window}|null (tokens in context after the last answer, and the
            model's window when the settings give it), cost, currency (the session's)}"}
          404: {description: no such session}
        """
        from tether.web.listing import COUNTED, fold
        from tether.web.usage import usage_by_turn

        session_id = _session_id(request)
        agent = self._hub.live_agent(session_id)
        session = agent.session if agent is not None else await self._load(session_id)
        catalog = self._catalog()
        first = self._model_of(session, at=0)
        turns = usage_by_turn(session.events, catalog, first)
        now = fold(session.events.of_types(COUNTED), catalog, first).to_json()
        return JSONResponse({"turns": [turn.to_json() for turn in turns], **now})

    async def _load(self, session_id: str) -> Session:
        try:
            return await self._hub.follows.load(session_id)
        except SessionNotFoundError:
            raise ApiError(404, f"no session {session_id}") from None
        except (LogStoreError, SessionError) as exc:  # damaged: said, never a traceback
            raise ApiError(500, f"session {session_id} cannot be read: {exc}") from None

    async def _check_exists(self, session_id: str) -> None:
        if self._hub.live_agent(session_id) is not None:
            return
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None or not await persistence.exists(session_id):
            raise ApiError(404, f"no session {session_id}")

    # -- the stream -------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """
        summary: The session's log records after a seq, then live (Server-Sent Events).
        description: >
          `events` messages hold a JSON array of records {type, seq, time, data}; their
          `id` is the seq of the last record. A tool/call or tool/result record also has
          `shown`, how its tool presents the call. Reconnect with `Last-Event-ID` (or `?after=`)
          to continue with no gap and no duplicate. `state` messages (no id) hold
          {live, questions, elicitations, progress}; elicitations are the servers' open
          requests for input {id, server, message, mode, url, fields}; progress lists the
          calls still running with {call_id, name, elapsed, tail} (seconds, last lines of
          output).
        parameters:
          - {name: session_id, in: path, required: true, schema: {type: string}}
          - {name: after, in: query, schema: {type: integer}, description: "seq; default -1"}
          - {name: Last-Event-ID, in: header, schema: {type: integer}}
        responses:
          200: {description: "text/event-stream"}
          404: {description: no such session}
        """
        session_id = _session_id(request)
        after = _after(request)
        await self._check_exists(session_id)
        return StreamingResponse(
            self._stream(session_id, after),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    async def _stream(self, session_id: str, after: int) -> AsyncIterator[bytes]:
        encoded = self._encoded
        encoded.enter(session_id)
        follow = self._hub.follows.follow(session_id, after, batch_window=BATCH_WINDOW)
        try:
            yield b"retry: %d\n\n" % RETRY_MS
            yield self._state(session_id)
            try:
                async for batch in follow:
                    if not batch:  # nudged: the questions changed
                        yield self._state(session_id)
                    else:  # at most a follower's batch: a page renders as it loads
                        shown = self._shown(session_id)
                        yield encoded.message(session_id, batch, shown, self._cwd(session_id))
            except (LogStoreError, SessionError) as exc:
                # The log was damaged or deleted while followed: the page is told once
                # and stops reconnecting (a reconnect would only fail again).
                log.warning("following session %s: %s", session_id, exc)
                failed = {"message": f"session {session_id} cannot be read: {exc}"}
                yield b"event: failed\ndata: %b\n\n" % msgspec.json.encode(failed)
        finally:
            await follow.aclose()
            encoded.leave(session_id)

    def _model_of(self, session: Session, *, at: int | None = None) -> str:
        """The model of ``session``'s request at ``at`` (default: its next one)."""
        return session_model(session, configured=self._default_model, at=at).model

    def _cwd(self, session_id: str) -> str | None:
        """The working directory of session ``session_id`` when it is live here."""
        agent = self._hub.live_agent(session_id)
        return None if agent is None else agent.session.header.cwd

    def _shown(self, session_id: str) -> Shown:
        """How the calls of the tools session ``session_id`` sees are shown."""
        return shown_in(self._ctx.get(TOOLS), session_id)

    def _questions(self, session_id: str) -> list[dict[str, object]]:
        """The open questions of the session's page, each with ``shown``, how its tool
        presents the call (as the asking agent sees its tools), and the diffs of the
        change it makes: the preview's, else those its arguments declare."""
        registry = self._ctx.get(TOOLS)
        asked: list[dict[str, object]] = []
        for q in self._hub.questions(session_id):
            shown = shown_in(registry, q.agent_id)(q.tool)
            diffs = q.diffs or call_diffs(shown, q.arguments, self._cwd(q.agent_id))
            asked.append({**q.to_json(), "shown": msgspec.to_builtins(shown), "diffs": diffs})
        return asked

    def _state(self, session_id: str) -> bytes:
        agent = self._hub.live_agent(session_id)
        state = {
            "live": agent is not None,
            "questions": self._questions(session_id),
            "elicitations": [e.to_json() for e in self._hub.elicitations(session_id)],
            "progress": [msgspec.to_builtins(p) for p in self._hub.progress(session_id)],
            "children": self._hub.children(session_id),
        }
        return b"event: state\ndata: %b\n\n" % msgspec.json.encode(state)

    # -- steering ---------------------------------------------------------------------

    async def prompt(self, request: Request) -> Response:
        """
        summary: Queue a prompt as the session's next turn, or steer the running turn; a
          text `/name argument` naming a command runs it instead (a server's prompt
          `/mcp__server__prompt` queues what the server answers as the next turn).
        description: A session stored and live nowhere is resumed here first. The
          `@server:uri` words of a prompt attach those resources of the session's MCP
          servers.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [text]
                properties:
                  text: {type: string}
                  steer: {type: boolean, description: "deliver at the running turn's next step"}
        responses:
          200: {description: "{command, answer}: the text ran the command; answer is what
            it said (or null)"}
          202: {description: "{queued: true, steer, attached: [line]}: a line for each
            resource attached"}
          400: {description: "a command refused its input, or a resource a mention names
            could not be attached (the prompt is not sent)"}
          404: {description: no such session}
          409: {description: "live in another process; {holder: {host, pid}} names it"}
          413: {description: the prompt is too large}
          500: {description: a command failed (the error names it)}
          503: {description: "the prompt could not be stored: refused, it never runs"}
        """
        session_id = _session_id(request)
        body = await _json_body(request, limit=MAX_PROMPT_BYTES)
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "text must be a non-empty string")
        steer = body.get("steer", False) is True
        from tether.agent.commands import CommandError
        from tether.front.prompting import CommandFailedError

        try:
            sent = await self._hub.prompt(session_id, text, steer=steer)
        except LiveElsewhereError as exc:
            raise ApiError(409, str(exc), holder=exc.holder.to_json()) from None
        except UnknownSessionError as exc:
            raise ApiError(404, str(exc)) from None
        except (HubClosedError, NotStoredError) as exc:
            raise ApiError(503, str(exc)) from None
        except (CommandError, NotAttachedError) as exc:
            raise ApiError(400, str(exc)) from None
        except CommandFailedError as exc:
            raise ApiError(500, f"{text.split()[0]} {exc}") from None
        if sent.command is not None:
            return JSONResponse({"command": sent.command, "answer": sent.answer})
        answer = {"queued": True, "steer": steer, "attached": list(sent.attached)}
        return JSONResponse(answer, status_code=202)

    async def commands(self, request: Request) -> Response:
        """
        summary: The slash commands a prompt of the session can run (a server's prompts
          among them, with their arguments), once a changed prompt list is applied.
        description: A session stored and live nowhere is resumed here first.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{commands: [{name, description, hint, arguments: [{name,
            description, required}]}]}"}
          404: {description: no such session}
          409: {description: "live in another process; {holder: {host, pid}} names it"}
        """
        from tether.agent.commands import COMMANDS
        from tether.front.prompting import offered_commands
        from tether.web.offers import commands_json

        agent = await self._open(_session_id(request))
        offered = await offered_commands(agent, self._ctx.get(COMMANDS))
        return JSONResponse({"commands": commands_json(offered)})

    async def resources(self, request: Request) -> Response:
        """
        summary: The resources each MCP server of the session lists (what `@server:uri`
          in a prompt attaches). A server that fails to list them has its error.
        description: A session stored and live nowhere is resumed here first.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{servers: [{server, resources: [{uri, name, title,
            description, mime_type}], error}]}"}
          404: {description: no such session}
          409: {description: "live in another process; {holder: {host, pid}} names it"}
        """
        from tether.front.prompting import list_mcp_resources
        from tether.web.offers import resources_json

        agent = await self._open(_session_id(request))
        return JSONResponse({"servers": resources_json(await list_mcp_resources(agent))})

    async def _open(self, session_id: str) -> Agent:
        """The session's agent, live here or resumed here (:meth:`WebHub.open`).

        Raises:
            ApiError: 404 no such session, 409 live elsewhere, 503 closing.
        """
        try:
            return await self._hub.open(session_id)
        except LiveElsewhereError as exc:
            raise ApiError(409, str(exc), holder=exc.holder.to_json()) from None
        except UnknownSessionError as exc:
            raise ApiError(404, str(exc)) from None
        except HubClosedError as exc:
            raise ApiError(503, str(exc)) from None

    async def configure(self, request: Request) -> Response:
        """
        summary: Switch the session's model, permission mode or sandbox; the change is
          logged (`session/config`) and obeyed from the next model request (model), tool
          call (mode) or process started (sandbox). A session stored and live nowhere is
          resumed here first.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [option, value]
                properties:
                  option: {type: string, enum: [model, mode, sandbox]}
                  value:
                    type: string
                    description: "PROVIDER:MODEL; ask or auto; read-only, workspace-write
                      or full-access"
        responses:
          200: {description: "{model, mode, sandbox: {mode, network} or null, changed}"}
          400: {description: an unknown option, or a value it does not take}
          404: {description: no such session}
          409: {description: "live in another process; {holder: {host, pid}} names it"}
        """
        session_id = _session_id(request)
        await self._check_exists(session_id)
        body = await _json_body(request, limit=4096)
        option, value = body.get("option"), body.get("value")
        if option == MODE_OPTION:
            if value not in [mode.value for mode in Mode]:
                raise ApiError(400, f"mode must be ask or auto, got {value!r}")
        elif option == MODEL_OPTION:
            _check_model(self._ctx, value)
        elif option == SANDBOX_OPTION:
            if self._sandbox_choice(value) is None:  # no value at all
                known = ", ".join(mode.value for mode in SandboxMode)
                raise ApiError(400, f"sandbox must be one of {known}, got none")
        else:
            raise ApiError(400, f"option must be model, mode or sandbox, got {option!r}")
        assert isinstance(value, str)
        agent = await self._open(session_id)
        session = agent.session
        current = self._setting(agent, option)
        if value != current:
            session.append(ConfigChanged(option=option, value=value))
        return JSONResponse(
            {
                "model": self._model_of(session),
                "mode": self._hub.mode_of(agent).value,
                "sandbox": self._sandbox_of(session.settings.options),
                "changed": value != current,
            }
        )

    def _setting(self, agent: Agent, option: str) -> str | None:
        """The current value of ``option`` (model, mode or sandbox) of ``agent``'s session."""
        if option == MODE_OPTION:
            return self._hub.mode_of(agent).value
        if option == SANDBOX_OPTION:
            shown = self._sandbox_of(agent.session.settings.options)
            return None if shown is None else shown["mode"]
        return self._model_of(agent.session)

    async def cancel(self, request: Request) -> Response:
        """
        summary: Stop the session's work (cancel, cause user). Repeats while it settles do
          nothing.
        description: A session live on another host (PostgreSQL) is stopped there (the
          cross-host cancel); `holder` then names that host.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          202: {description: "{cancelled: bool, holder?: {host, pid}} (false: a stop is
            already settling, or nothing runs)"}
          404: {description: no such session}
          409: {description: "live in another process that cannot be reached from here
            (sessions not shared in PostgreSQL); {holder: {host, pid}} names it"}
        """
        session_id = _session_id(request)
        try:
            return JSONResponse({"cancelled": self._hub.cancel(session_id)}, status_code=202)
        except UnknownSessionError:
            pass
        try:
            holder = await self._hub.cancel_elsewhere(session_id)
        except LiveElsewhereError as exc:
            raise ApiError(409, str(exc), holder=exc.holder.to_json()) from None
        except UnknownSessionError:
            await self._check_exists(session_id)
            # stored, live nowhere: nothing runs
            return JSONResponse({"cancelled": False}, status_code=202)
        answer: dict[str, object] = {"cancelled": holder is not None}
        if holder is not None:
            answer["holder"] = holder.to_json()
        return JSONResponse(answer, status_code=202)

    # -- rewind and fork ---------------------------------------------------------------

    async def turns(self, request: Request) -> Response:
        """
        summary: The session's turns, and which can be rewound to (a workspace snapshot).
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{snapshots: bool, turns: [{turn, seq, prompt, snapshot: bool}]}"}
          404: {description: no such session}
        """
        session = await self._session(_session_id(request))
        points = turn_points(session.events)
        listed = [
            {"turn": p.turn, "seq": p.seq, "prompt": p.prompt, "snapshot": p.snapshot is not None}
            for p in points
        ]
        return JSONResponse({"snapshots": self._ctx.get(WORKSPACES) is not None, "turns": listed})

    async def diff(self, request: Request) -> Response:
        """
        summary: What changed in the workspace since a turn started (shell changes included).
        parameters:
          - {name: session_id, in: path, required: true, schema: {type: string}}
          - {name: turn, in: query, schema: {type: integer, minimum: 1},
             description: "default: the first turn with a snapshot"}
        responses:
          200: {description: "{turn, patch (a unified diff), files (its hunks, numbered rows),
                outside, unrestorable}"}
          400: {description: no such turn, or it has no snapshot}
          404: {description: no such session}
        """
        session = await self._session(_session_id(request))
        turn = _int_param(request, "turn", default=0, low=1) or None
        try:
            changes = await changes_since(self._workspaces(), session, turn)
        except (LookupError, RewindError) as exc:
            raise ApiError(400, str(exc)) from None
        except SnapshotError as exc:
            raise ApiError(500, str(exc)) from None
        return JSONResponse(
            {
                "turn": changes.turn,
                "patch": changes.patch,
                "files": [f.to_json() for f in patch_files(changes.patch)],
                "outside": list(changes.outside),
                "unrestorable": list(changes.unrestorable),
            }
        )

    async def rewind(self, request: Request) -> Response:
        """
        summary: Take the workspace, the conversation (a branch) or both back to a turn's start.
        description: A file the rewind would overwrite that was changed outside the agent
          since the snapshot refuses it (409 with `outside`), unless `force`. Files no
          snapshot holds are listed in `unrestorable`, never touched.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [turn]
                properties:
                  turn: {type: integer, minimum: 1}
                  what: {type: string, enum: [code, conversation, both], default: both}
                  force: {type: boolean}
        responses:
          200: {description: "{lines, branch (the new session, or null), written, deleted,
            overwritten, unrestorable}"}
          400: {description: bad input, no such turn, or it has no snapshot}
          409: {description: "a turn is running, the session is live elsewhere, or
            `outside` names files changed outside the agent (send force to overwrite)"}
        """
        session_id = _session_id(request)
        await self._check_exists(session_id)
        body = await _json_body(request, limit=MAX_PROMPT_BYTES)
        turn = _turn_of(body.get("turn"))
        what = body.get("what", "both")
        if what not in REWIND_CHOICES:
            raise ApiError(400, "what must be code, conversation or both")
        force = body.get("force", False) is True
        done = await self._rewinding(self._rewind(session_id, turn, what, force=force))
        rewound = done.rewound
        return JSONResponse(
            {
                "lines": done.lines(),
                "branch": None if done.forked is None else done.forked.id,
                "written": [] if rewound is None else list(rewound.restored.written),
                "deleted": [] if rewound is None else list(rewound.restored.deleted),
                "overwritten": [] if rewound is None else list(rewound.plan.outside),
                "unrestorable": [] if rewound is None else list(rewound.plan.unrestorable),
            }
        )

    async def _rewind(
        self, session_id: str, turn: int, what: RewindChoice, *, force: bool
    ) -> RewindDone:
        persistence = self._ctx.get(PERSISTENCE)
        workspaces = self._ctx.get(WORKSPACES)
        agent = self._hub.live_agent(session_id)
        if agent is not None:
            if agent.session.open_turn is not None:
                raise ApiError(409, "a turn is running: stop it before a rewind")
            return await rewind_live(
                workspaces, persistence, agent.session, turn, what, force=force
            )
        await self._check_not_elsewhere(session_id)
        if persistence is None:
            raise ApiError(404, f"no session {session_id}")
        return await rewind_stored(
            workspaces,
            persistence,
            self._ctx.service(SESSIONS),
            session_id,
            turn=turn,
            choice=what,
            force=force,
        )

    async def fork(self, request: Request) -> Response:
        """
        summary: A branch of the session (before a turn, else at its end), stored as a new
          session; the session keeps every event.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        requestBody:
          content:
            application/json:
              schema: {type: object, properties: {turn: {type: integer, minimum: 1}}}
        responses:
          201: {description: "{id (the branch), lines}"}
          400: {description: bad input, or no such turn}
          404: {description: no such session}
        """
        session_id = _session_id(request)
        await self._check_exists(session_id)
        body = await _json_body(request, limit=MAX_PROMPT_BYTES)
        turn = None if body.get("turn") is None else _turn_of(body.get("turn"))
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            raise ApiError(503, "a branch needs stored sessions (no persistence row)")
        agent = self._hub.live_agent(session_id)
        parent = agent.session if agent is not None else await self._load(session_id)
        forked = await self._rewinding(
            fork_session(persistence, self._ctx.get(WORKSPACES), parent, turn=turn)
        )
        return JSONResponse({"id": forked.id, "lines": forked_lines(forked)}, status_code=201)

    async def _rewinding(self, work: Awaitable[T]) -> T:
        """``work``'s result, its refusals said as API errors."""
        try:
            return await work
        except OutsideChangesError as exc:
            raise ApiError(409, exc.describe("force"), outside=list(exc.paths)) from None
        except SessionNotFoundError as exc:
            raise ApiError(404, str(exc)) from None
        except (SessionLeasedError, SessionConflictError, RewindError) as exc:
            raise ApiError(409, str(exc)) from None
        except LookupError as exc:
            raise ApiError(400, str(exc)) from None
        except (SnapshotError, LogStoreError) as exc:
            raise ApiError(500, str(exc)) from None

    async def _session(self, session_id: str) -> Session:
        agent = self._hub.live_agent(session_id)
        return agent.session if agent is not None else await self._load(session_id)

    async def _check_not_elsewhere(self, session_id: str) -> None:
        holder = await self._hub.holder(session_id)
        if holder is not None:
            raise ApiError(
                409, f"session {session_id} is live in another process", holder=holder.to_json()
            )

    def _workspaces(self) -> Workspaces:
        workspaces = self._ctx.get(WORKSPACES)
        if workspaces is None:
            raise ApiError(400, "workspace snapshots are off (no tether.plugins.rewind row)")
        return workspaces

    # -- permission questions ----------------------------------------------------------

    async def questions(self, request: Request) -> Response:
        """
        summary: The permission questions open in the session's page.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{questions: [{id, tool, arguments, title, diffs, agent_id,
            always: button text (Always allow RULE, …)|null, always_rules: [RULE],
            not_always: why|null, asked_by: who asks whatever the mode|null,
            shown}]}"}
        """
        session_id = _session_id(request)
        await self._check_exists(session_id)
        return JSONResponse({"questions": self._questions(session_id)})

    async def answer(self, request: Request) -> Response:
        """
        summary: Answer a permission question.
        parameters:
          - {name: session_id, in: path, required: true, schema: {type: string}}
          - {name: question_id, in: path, required: true, schema: {type: string}}
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [allow]
                properties:
                  allow: {type: boolean}
                  always: {type: boolean, description: "with allow: keep the question's
                    `always_rules` as allow rules of this session"}
        responses:
          200: {description: "{answered: true}"}
          400: {description: "a bad answer, or always for a question that does not offer it"}
          404: {description: no such open question}
        """
        session_id = _session_id(request)
        body = await _json_body(request, limit=4096)
        allow = body.get("allow")
        if not isinstance(allow, bool):
            raise ApiError(400, "allow must be true or false")
        always = body.get("always", False)
        if not isinstance(always, bool):
            raise ApiError(400, "always must be true or false")
        question_id = request.path_params["question_id"]
        try:
            answered = self._hub.answer(session_id, question_id, allow, always=always)
        except WebError as exc:
            raise ApiError(400, str(exc)) from None
        if not answered:
            raise ApiError(404, f"no open question {question_id} in session {session_id}")
        return JSONResponse({"answered": True})

    async def answer_elicitation(self, request: Request) -> Response:
        """
        summary: Answer a server's request for input (an MCP elicitation).
        parameters:
          - {name: session_id, in: path, required: true, schema: {type: string}}
          - {name: elicitation_id, in: path, required: true, schema: {type: string}}
        requestBody:
          content:
            application/json:
              schema:
                type: object
                required: [action]
                properties:
                  action: {type: string, enum: [accept, decline, cancel]}
                  content: {type: object, description: "with accept of a form: its values"}
        responses:
          200: {description: "{answered: true}"}
          400: {description: "a bad action, or content that does not fit the form (the
            request stays open)"}
          404: {description: no such open request}
        """
        session_id = _session_id(request)
        elicitation_id = request.path_params["elicitation_id"]
        if not any(e.id == elicitation_id for e in self._hub.elicitations(session_id)):
            raise ApiError(404, f"no open request {elicitation_id} in session {session_id}")
        body = await _json_body(request, limit=65536)
        action = body.get("action")
        if not isinstance(action, str):
            raise ApiError(400, "action must be accept, decline or cancel")
        try:
            answered = self._hub.answer_elicitation(
                session_id, elicitation_id, action, body.get("content")
            )
        except WebError as exc:
            raise ApiError(400, str(exc)) from None
        if not answered:
            raise ApiError(404, f"no open request {elicitation_id} in session {session_id}")
        return JSONResponse({"answered": True})

    # -- background tasks ------------------------------------------------------------

    async def tasks(self, request: Request) -> Response:
        """
        summary: The background tasks the session owns.
        parameters: [{name: session_id, in: path, required: true, schema: {type: string}}]
        responses:
          200: {description: "{tasks: [{id, command, status, exit_code, signal, started_at,
            finished_at}]}"}
        """
        session_id = _session_id(request)
        await self._check_exists(session_id)
        return JSONResponse(
            {"tasks": [msgspec.to_builtins(task) for task in self._hub.tasks(session_id)]}
        )

    async def task(self, request: Request) -> Response:
        """
        summary: One background task of the session, with the tail of its output.
        parameters:
          - {name: session_id, in: path, required: true, schema: {type: string}}
          - {name: task_id, in: path, required: true, schema: {type: string}}
        responses:
          200: {description: "{task, stdout, stderr}"}
          404: {description: no such task in this session}
        """
        session_id = _session_id(request)
        task_id = _task_id(request)
        try:
            task, stdout, stderr = self._hub.task_tail(session_id, task_id)
        except UnknownTaskError as exc:
            raise ApiError(404, str(exc)) from None
        return JSONResponse({"task": msgspec.to_builtins(task), "stdout": stdout, "stderr": stderr})

    async def kill(self, request: Request) -> Response:
        """
        summary: Kill a background task of the session (its process group).
        parameters:
          - {name: session_id, in: path, required: true, schema: {type: string}}
          - {name: task_id, in: path, required: true, schema: {type: string}}
        responses:
          200: {description: "{task} (with its stop report)"}
          404: {description: no such task in this session}
        """
        session_id = _session_id(request)
        task_id = _task_id(request)
        try:
            task = await self._hub.kill(session_id, task_id)
        except UnknownTaskError as exc:
            raise ApiError(404, str(exc)) from None
        return JSONResponse({"task": msgspec.to_builtins(task)})


# -- request helpers ----------------------------------------------------------------------


def _session_id(request: Request) -> str:
    given = request.path_params["session_id"]
    try:
        return validate_session_id(given)
    except InvalidSessionIdError:
        raise ApiError(400, "invalid session id") from None


def _matches(row: Mapping[str, object], prompts: str, needle: str) -> bool:
    """Whether a listed session's title, id, directory or prompts hold ``needle``
    (folded to lower case, as ``prompts`` are)."""
    fields = (row.get("title"), row.get("id"), row.get("cwd"))
    return any(needle in str(field or "").casefold() for field in fields) or needle in prompts


def _is_dir(path: str) -> bool:
    return os.path.isabs(path) and os.path.isdir(path)


def _normal(path: str) -> str:
    return os.path.normpath(path)


def _task_id(request: Request) -> str:
    given = request.path_params["task_id"]
    if not _TASK_ID.fullmatch(given):
        raise ApiError(400, "invalid task id")
    return str(given)


def _int_param(request: Request, name: str, *, default: int, low: int) -> int:
    given = request.query_params.get(name)
    if given is None:
        return default
    try:
        value = int(given)
    except ValueError:
        raise ApiError(400, f"{name} must be a whole number") from None
    if value < low:
        raise ApiError(400, f"{name} must be at least {low}")
    return value


def _after(request: Request) -> int:
    """The seq the stream starts after: ``Last-Event-ID`` (a reconnect) wins over ``after``."""
    given = request.headers.get("last-event-id") or request.query_params.get("after")
    if given is None or given == "":
        return -1
    try:
        value = int(given)
    except ValueError:
        raise ApiError(400, "the last event id must be a whole number") from None
    if value < -1:
        raise ApiError(400, "the last event id must be at least -1")
    return value


async def _json_body(request: Request, *, limit: int) -> dict[str, Any]:
    """The request's JSON object, read up to ``limit`` bytes (413 beyond)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body is over {limit} bytes")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        raise ApiError(400, "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _run_request(body: dict[str, Any]) -> dict[str, Any]:
    """The arguments of :meth:`Cluster.submit` a ``POST /api/runs`` body gives (400 for
    a value of the wrong kind; the queue checks the rest)."""
    task, cwd = body.get("task"), body.get("cwd")
    if not isinstance(task, str) or not task.strip():
        raise ApiError(400, "task must be a non-empty string")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise ApiError(400, f"cwd must be an absolute path, got {cwd!r}")
    submit: dict[str, Any] = {"task": task, "cwd": cwd}
    for name in ("model", "queue"):
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ApiError(400, f"{name} must be a non-empty string, got {value!r}")
        if value is not None:
            submit[name] = value
    for name, least in (("priority", -(2**31)), ("max_attempts", 1)):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value < 2**31:
            raise ApiError(400, f"{name} must be a whole number from {least} to 2^31-1")
        submit[name] = value
    return submit


def _turn_of(given: object) -> int:
    if not isinstance(given, int) or isinstance(given, bool) or given < 1:
        raise ApiError(400, "turn must be a whole number >= 1")
    return given


def _check_model(ctx: Context, model: object) -> None:
    from tether.llm.request import parse_model_ref
    from tether.llm.service import LLM

    if not isinstance(model, str):
        raise ApiError(400, "model must be a string")
    try:
        provider = parse_model_ref(model)[0]
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    llm = ctx.get(LLM)
    if llm is not None and provider not in llm.providers():
        raise ApiError(400, f"model {model!r}: provider {provider!r} is not configured here")

"""Plugin: the live exporter, sessions' traces sent as their logs are written.

Off by default (the ``telemetry`` row of the bundled ``tether.yml`` is
disabled); an overlay turns it on and says where to send::

    plugins:
      - id: telemetry
        disabled: false
        config: {endpoint: "http://127.0.0.1:4318", content: false}

It follows what persistence writes (``session/written``): after each batch is
on disk, the new events of that session are folded
(:class:`~tether.telemetry.export.SessionTrace`) and the spans they closed are
sent over OTLP/HTTP, by one task the plugin owns, off the event loop. Only
durable events are ever traced, so the trace of a session is the trace of its
log: a session resumed after a crash (or taken over by another host) is folded
from seq 0 again and sends only the spans past its mark
(:class:`~tether.telemetry.export.ExportMarks`), including those the crash
repair closed. The writes of an interval go in one export. A batch the
endpoint does not take is kept and sent with the next (at most
:data:`MAX_BACKLOG` spans per session; older ones are dropped, and said so in
the log), the interval doubling with each failure up to :data:`MAX_INTERVAL`.

Trace context: each tool call's processes (``bash`` commands and background
tasks) get ``TRACEPARENT`` naming the call's ``execute_tool`` span,
through :data:`tether.shell.environment.CONTEXT_ENV`, set by a
``tool/before-execute`` listener in the task that runs the call. The
``tracing`` service (:class:`~tether.telemetry.context.Tracing`) gives the
context of processes started outside a call (MCP servers).

The OpenTelemetry packages are imported when the row mounts, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import Meta

from tether.location import data_dir
from tether.persist.service import PERSISTENCE, SESSION_WRITTEN
from tether.runtime.schema import Schema, Secret
from tether.session.store import SESSION_DISPOSED, SESSIONS
from tether.shell.environment import CONTEXT_ENV
from tether.telemetry.context import TRACING
from tether.telemetry.export import (
    ExportMarks,
    SessionTrace,
    catalog_pricing,
    trace_parent,
)
from tether.telemetry.propagation import SessionTracing, call_context, traceparent
from tether.telemetry.spans import FOLDED_TYPES, Pricing, SpanRecord, TraceParent
from tether.tools.execute import BEFORE_EXECUTE

if TYPE_CHECKING:
    from tether.persist.service import Persistence
    from tether.runtime import Context
    from tether.session import Session
    from tether.session.store import SessionStore
    from tether.telemetry.otlp import OtlpSink
    from tether.tools.execute import ToolInvocation

log = logging.getLogger(__name__)

name = "telemetry"
inject = ("sessions", "persistence")
provides = ("tracing",)

MAX_INTERVAL = 60.0
"""The longest wait between exports while the endpoint does not take them."""

MAX_BACKLOG = 10_000
"""Spans kept per session while the endpoint does not take them."""


class TelemetryConfig(Schema, frozen=True):
    """Where and what the live exporter sends."""

    endpoint: Annotated[str, Meta(min_length=1)] = "http://127.0.0.1:4318"
    """The OTLP/HTTP base URL (``/v1/traces`` and ``/v1/metrics`` are added)."""
    headers: dict[str, Secret] = msgspec.field(default_factory=dict)
    """HTTP headers of every request (an ``Authorization`` for a hosted backend); their
    values are secrets, masked wherever the configuration is shown."""
    content: bool = False
    """Record prompts, answers, tool arguments and results (secrets masked)."""
    service_name: str = "tether"
    """``service.name`` of the resource."""
    timeout: Annotated[float, Meta(gt=0, le=300)] = 5.0
    """Seconds an export may take, retries included; tether's exit waits at most this
    long for its last one."""
    interval: Annotated[float, Meta(ge=0, le=60)] = 2.0
    """At most one export per this many seconds: the writes of an interval are sent
    together (a turn's end is sent with its interval's; everything pending is sent
    when tether stops)."""
    data_dir: Path | None = None
    """Where the export marks are kept (under ``telemetry/``); default: the data directory."""


Config = TelemetryConfig


class LiveExporter:
    """The sessions of this process, traced as their events become durable."""

    def __init__(
        self,
        sink: OtlpSink,
        marks: ExportMarks,
        load: Callable[[str], Awaitable[Session | None]],
        *,
        content: bool,
        pricing: Pricing | None,
        interval: float = 0.0,
    ) -> None:
        self._sink = sink
        self._interval = interval
        self._marks = marks
        self._load = load
        self._content = content
        self._pricing = pricing
        self._traces: dict[str, SessionTrace] = {}
        self._parents: dict[str, TraceParent | None] = {}
        self._backlog: dict[str, list[SpanRecord]] = {}
        self._pending: dict[str, tuple[Session, int]] = {}
        self._gone: set[str] = set()
        self._failures = 0
        """Sends that failed in a row: the interval doubles with each (up to a minute)."""
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self.sent = 0
        """Spans sent so far."""
        self.cpu = 0.0
        """CPU seconds the exporter spent: folding (on the loop) and sending (in threads)."""

    # -- listeners ---------------------------------------------------------------

    def written(self, session: Session, durable: int) -> None:
        """``session/written``: the first ``durable`` events of ``session`` are on disk."""
        self._pending[session.id] = (session, durable)
        self._wake.set()

    def disposed(self, session: Session) -> None:
        """``session/disposed``: forget its fold once what is pending of it is sent (a
        later write folds it again from its mark)."""
        self._gone.add(session.id)
        if session.id not in self._pending:
            self._forget(session.id)

    def _forget(self, session_id: str) -> None:
        if not self._backlog.get(session_id):
            self._gone.discard(session_id)
            self._traces.pop(session_id, None)
            self._parents.pop(session_id, None)
            self._backlog.pop(session_id, None)

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """``tool/before-execute``: the processes of this call get its trace context.

        Set in the task that runs the call, where it stays until the next call
        of that task sets its own (calls that run together each have a task).
        """
        agent = invocation.exec.agent
        if agent is not None:
            session = agent.session
            parent = await self.parent_of(session)
            context = call_context(session, invocation.exec.call_id, parent)
            if context is not None:
                CONTEXT_ENV.set({**CONTEXT_ENV.get(), "TRACEPARENT": traceparent(context)})
        return await next_(invocation)

    # -- the exporting task --------------------------------------------------------

    async def run(self) -> None:
        """Send what writes made durable, at most once per interval (the writes of an
        interval go in one request), until :meth:`close`; then send what is left."""
        while True:
            if not self._pending:
                if self._closed.is_set():
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._send_pending()
            if self._interval and not self._closed.is_set():
                # A batching window, cut short by close: not an ordering wait.
                window = min(MAX_INTERVAL, self._interval * 2 ** min(self._failures, 6))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(window):
                        await self._closed.wait()

    def close(self) -> None:
        """Ask :meth:`run` to send what is pending now and return."""
        self._closed.set()
        self._wake.set()

    async def _send_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for session_id, (session, durable) in pending.items():
            try:
                await self._send(session, durable)
            except Exception:
                log.exception("telemetry: tracing session %s failed", session_id)
            if session_id in self._gone and session_id not in self._pending:
                self._forget(session_id)

    async def _send(self, session: Session, durable: int) -> None:
        trace = self._traces.get(session.id)
        if trace is None:
            parent = await self.parent_of(session)
            trace = self._traces[session.id] = SessionTrace.of(
                session,
                parent,
                content=self._content,
                pricing=self._pricing,
                sent_through=self._marks.get(session.id),
            )
        start = trace.fold.next_seq
        if durable <= start:
            return
        began = time.thread_time()
        events = session.events.of_types(FOLDED_TYPES, start, durable)
        backlog = self._backlog.setdefault(session.id, [])
        sent = trace.sent_through
        backlog.extend(s for s in trace.fold.fold_through(events, durable) if s.end_seq > sent)
        self.cpu += time.thread_time() - began
        if not backlog:
            return
        try:
            # The mark follows the send in the same thread: the window in which a
            # crash sends spans twice is the write of one small file.
            await asyncio.to_thread(self._send_and_mark, session.id, backlog, durable - 1)
        except Exception as exc:
            if len(backlog) > MAX_BACKLOG:
                dropped = len(backlog) - MAX_BACKLOG
                del backlog[:dropped]
                log.warning("telemetry: %d spans of session %s dropped", dropped, session.id)
            if not self._failures:
                log.warning(
                    "telemetry: spans of session %s not sent (%s); kept, and sent once the "
                    "endpoint takes them",
                    session.id,
                    exc,
                )
            self._failures += 1
            return
        if self._failures:
            log.warning("telemetry: the OTLP endpoint takes spans again")
            self._failures = 0
        self.sent += len(backlog)
        backlog.clear()
        trace.sent_through = durable - 1

    def _send_and_mark(self, session_id: str, spans: list[SpanRecord], through: int) -> None:
        began = time.thread_time()
        try:
            self._sink.send(spans)
            self._marks.set(session_id, through)
        finally:
            self.cpu += time.thread_time() - began

    async def parent_of(self, session: Session) -> TraceParent | None:
        """Where ``session``'s turns hang (:func:`~tether.telemetry.export.trace_parent`),
        read once."""
        if session.id not in self._parents:
            self._parents[session.id] = await trace_parent(session.header, self._load)
        return self._parents[session.id]


async def apply(ctx: Context, config: TelemetryConfig) -> None:
    from tether.telemetry.otlp import OtlpSink

    store: SessionStore = ctx.service(SESSIONS)
    persistence: Persistence = ctx.service(PERSISTENCE)

    async def load(session_id: str) -> Session | None:
        live = store.get(session_id)
        if live is not None:
            return live
        try:
            return await persistence.load(session_id, as_stored=True)
        except Exception as exc:
            log.info("telemetry: session %s cannot be read (%s)", session_id, exc)
            return None

    headers = {name: value.get_secret_value() for name, value in config.headers.items()}
    sink = OtlpSink(
        config.endpoint, headers, service_name=config.service_name, timeout=config.timeout
    )
    exporter = LiveExporter(
        sink,
        ExportMarks(data_dir(config.data_dir) / "telemetry"),
        load,
        content=config.content,
        pricing=_pricing(ctx),
        interval=config.interval,
    )

    async def body():  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(exporter.run(), name="telemetry")

        async def stop() -> None:
            exporter.close()
            await task
            await asyncio.to_thread(sink.close)
            log.debug(
                "telemetry: %d spans sent; exporter CPU %.1f ms", exporter.sent, exporter.cpu * 1e3
            )

        yield stop
        # Unwound first (LIFO): no write is heard after the task's last export.
        yield ctx.listen(SESSION_WRITTEN, exporter.written)
        yield ctx.listen(SESSION_DISPOSED, exporter.disposed)
        yield ctx.listen(BEFORE_EXECUTE, exporter.before_execute)

    await ctx.effect(body, label="telemetry")
    ctx.provide(TRACING, SessionTracing(exporter.parent_of))


def _pricing(ctx: Context) -> Pricing:
    """Prices from the model catalog of the ``llm`` service, read when a call is priced
    (the row may mount after this one)."""
    from tether.llm.service import LLM

    def price(model: str, usage: Mapping[str, int]) -> tuple[float, str] | None:
        llm = ctx.get(LLM)
        return None if llm is None else catalog_pricing(llm.catalog)(model, usage)

    return price

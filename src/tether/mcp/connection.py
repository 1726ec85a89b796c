"""One MCP server of one agent: its connection, its calls, its end.

An :class:`McpConnection` runs the SDK's ``ClientSession`` in a task of its
own (the SDK's task groups must be entered and left by one task), which
:meth:`~McpConnection.close` stops and awaits: nothing it starts outlives it.

**Start** (:meth:`~McpConnection.start`): the transport is opened (a stdio
server's process is spawned), the protocol is negotiated and every page of
``tools/list`` read, all within ``startup_timeout``. Negotiation is the SDK's
``auto`` mode: ``server/discover`` first, which a server of the current
specification (2026-07-28) answers; a 2025-era server, which does not know it,
gets the ``initialize`` handshake instead (see ``docs/mcp.md``). Any failure
— a missing command, a process that exits at once, a server that never
answers — is a
:class:`~tether.mcp.errors.McpStartError` whose message says which, and the
process is stopped before it is raised.

**Calls** (:meth:`~McpConnection.call`): a tool call waits for its answer or
for the call's cancel signal. On cancel the SDK abandons the request (it sends
``notifications/cancelled``; over streamable HTTP at 2026-07-28 it closes the
request's stream), and tether sends a probe (``ping`` on a 2025-era
connection, ``server/discover`` on a current one, which has no ``ping``) and
waits up to ``cancel_grace``: a server that answers it honours cancellation
and keeps running. One that does not is stuck in the call: a stdio server is
then stopped (SIGTERM, then SIGKILL), an HTTP one is left alone, and the call
ends cancelled either way.

**Elicitation**: with ``elicit`` given, tether tells the server it can ask
the person for input (form and URL modes); a server's ``elicitation/create``
becomes an :class:`~tether.agent.elicitation.Elicitation` handed to
``elicit``, whose answer is sent back (a schema tether cannot present is an
invalid-params error). A question still open when a call of the server is
cancelled, or the connection closes, is withdrawn: it is answered
``cancel``. (The SDK reads nothing else from the server while a question is
open: the server is waiting for it.)

**Changes**: a server's ``notifications/tools/list_changed`` is passed to
``on_tools_changed``, which reads the new list with
:meth:`~McpConnection.list_tools`; ``notifications/prompts/list_changed``
likewise to ``on_prompts_changed`` (:meth:`~McpConnection.list_prompts`). A
2025-era server sends them unasked; a current one sends them on the
``subscriptions/listen`` stream tether opens for it when the server's
``tools`` or ``prompts`` capability says ``listChanged`` (one stream, asking
for the lists that change and that tether follows).

**Loss**: a stdio server whose process exits while the agent lives is
*lost*: calls in flight end with an error, later calls are refused with the
reason (its exit status and last stderr lines), and ``on_lost`` hears it
once. A lost server is not restarted: the session keeps working without its
tools (see ``docs/mcp.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import msgspec

from tether import __version__
from tether.agent.elicitation import Elicitation, ElicitationSchemaError, FormField, read_schema
from tether.mcp.errors import McpStartError, McpUnavailableError
from tether.mcp.servers import ServerSpec, StdioServer
from tether.mcp.stdio import StdioProcess
from tether.runtime.signal import Cancelled, CancelSignal
from tether.shell.environment import CONTEXT_ENV

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.client import Client, ClientSession, Transport
    from mcp.client.session import ClientRequestContext
    from mcp_types import RequestParamsMeta

    from tether.agent.elicitation import Elicited
    from tether.shell.guard import OrphanGuard
    from tether.shell.sandbox import SandboxPolicy

log = logging.getLogger(__name__)


WITHDRAW_WAIT = 5.0
"""How long a cancelled call waits for its withdrawn question's answer to be logged."""
ACCEPTED_URLS_KEPT = 64
"""Accepted URL questions of one server kept for the server's word that they are done."""

DISCOVER_WAIT = 3.0
"""How long the SDK waits for an answer to ``server/discover`` before it tries
``initialize`` (its own default is 10 s). Some 2025-era servers never answer a
request that comes before ``initialize``, not even with an error; a current
server that is slower than this is reached all the same: the SDK asks it again
when ``initialize`` is refused."""


class McpSettings(msgspec.Struct, frozen=True):
    """The limits every server of the ``mcp`` plugin runs under (seconds and sizes)."""

    startup_timeout: float = 10.0
    """From spawn (or first connect) to a listed set of tools."""
    call_timeout: float | None = None
    """A tool call that is not answered by then ends with an error; ``None``: no limit."""
    cancel_grace: float = 1.0
    """How long a cancelled call waits for the server to show it honoured the cancel."""
    kill_grace: float = 2.0
    """Between SIGTERM and SIGKILL when a stdio server is stopped."""
    max_result_chars: int = 100_000
    """A tool result longer than this is cut, with a note saying how much was left out."""
    max_message_bytes: int = 32 << 20
    """A stdio server that sends a longer message is stopped."""
    elicitation_timeout: float | None = 600.0
    """A server's question to the person unanswered by then is answered ``cancel``."""


class Owner(Protocol):
    """Whom a server belongs to: an agent, or a command that starts one to test it."""

    @property
    def id(self) -> str:
        """Names the server's task, its process group label and its log lines."""
        ...


class McpConnection:
    """A connection to one server, owned by one agent (see the module docs)."""

    def __init__(
        self,
        spec: ServerSpec,
        settings: McpSettings,
        *,
        cwd: str | None,
        guard: OrphanGuard | None,
        owner: Owner,
        on_lost: Callable[[McpConnection, str], None] | None = None,
        sandbox: SandboxPolicy | None = None,
        on_tools_changed: Callable[[McpConnection], None] | None = None,
        on_prompts_changed: Callable[[McpConnection], None] | None = None,
        auth: Any = None,
        elicit: Callable[[Elicitation], Awaitable[Elicited]] | None = None,
        completed: Callable[[Elicitation], None] | None = None,
    ) -> None:
        self.spec = spec
        self._auth = auth
        """An HTTP server's ``httpx2.Auth`` (OAuth, :mod:`tether.mcp.oauth`), if any."""
        self._sandbox = sandbox
        self._settings = settings
        self._cwd = cwd
        self._guard = guard
        self.owner = owner
        """The agent (or command) the server belongs to."""
        self._on_lost = on_lost
        self._on_tools_changed = on_tools_changed
        self._on_prompts_changed = on_prompts_changed
        self._elicit = elicit
        self._completed = completed
        self._accepted_urls: dict[str, Elicitation] = {}
        """The URL questions the person accepted, by the server's elicitation id, until
        the server says they are done with (at most :data:`ACCEPTED_URLS_KEPT`)."""
        self._calls: dict[CancelSignal, str | None] = {}
        """The cancel signal of each call in flight, and its tool call id."""
        self._asking: set[CancelSignal] = set()
        """The withdrawal signal of each question of the server still open."""
        self._process: StdioProcess | None = None
        self._session: ClientSession | None = None
        self._client: Client | None = None
        """The SDK's client of the session: its calls answer a 2026-07-28 server's
        ``input_required`` results (a question for the person) and retry."""
        self._ready: asyncio.Future[list[types.Tool]] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.lost: str | None = None
        """Why the server is no longer usable, once it is not."""
        self.protocol_version: str | None = None
        """The MCP version agreed with the server, once started (``2026-07-28`` for a
        current server, a 2025-era one for a server that knows only ``initialize``)."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        """The stdio server's process id (``None`` for an HTTP server, or before it started)."""
        return self._process.pid if self._process is not None else None

    # -- start and close -------------------------------------------------------------

    async def start(self) -> list[types.Tool]:
        """Connect, initialize, and list the server's tools.

        Raises:
            McpStartError: see the module docs; the server is stopped first.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._run(), name=f"mcp:{self.owner.id}:{self.name}")
        try:
            async with asyncio.timeout(self._settings.startup_timeout):
                return await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            raise McpStartError(
                f"it did not answer its handshake (server/discover or initialize) "
                f"and tools/list within "
                f"{self._settings.startup_timeout:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop the session and the server; return when both are gone. Idempotent."""
        self._closing = True
        self._withdraw("the server is being stopped")
        self._stop.set()
        if self._session is None and self._process is not None:
            # Not initialized (a start that failed or timed out): nothing to close
            # gracefully, and a server stuck before its answer holds the task up.
            await self._process.stop(self._settings.kill_grace)
        task = self._task
        if task is not None:
            try:
                async with asyncio.timeout(self._settings.kill_grace):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self._process is not None:
            await self._process.stop(self._settings.kill_grace)

    async def _run(self) -> None:
        ready = self._ready
        assert ready is not None
        try:
            async with self._session_of() as session:
                tools = await _list_tools(session)
                self._session = session
                ready.set_result(tools)
                await self._until_stopped()
        except BaseException as exc:
            if not ready.done():
                if self._closing or not isinstance(exc, Exception):
                    ready.cancel()  # nobody waits for it any more
                else:
                    await _exit_seen(self._process)
                    ready.set_exception(_start_error(exc, self._process))
            elif not self._closing:
                self._lose(f"its connection failed: {_describe(exc)}")
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None
        if not ready.cancelled() and ready.exception() is None and not self._closing:
            self._lose(self._exit_reason())

    async def _until_stopped(self) -> None:
        """Until :meth:`close`, or until a stdio server's process exits."""
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._stop.wait())]
        if self._process is not None:
            waits.append(self._process.exited)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waits[0].cancel()

    @contextlib.asynccontextmanager
    async def _session_of(self) -> AsyncIterator[ClientSession]:
        import mcp.client.session
        from mcp.client import Client
        from mcp_types import Implementation

        mcp.client.session.DISCOVER_TIMEOUT_SECONDS = DISCOVER_WAIT

        client = Client(
            cast("Transport", self._transport()),
            mode="auto",  # server/discover, else the initialize handshake
            cache=None,  # tether reads a list when it needs it, never from a cache
            client_info=Implementation(name="tether", version=__version__),
            message_handler=self._on_message,
            elicitation_callback=None if self._elicit is None else self._on_elicit,
        )
        async with client:
            self.protocol_version = client.protocol_version
            log.debug("mcp server %s speaks MCP %s", self.name, self.protocol_version)
            listener = self._listen(client)
            self._client = client
            try:
                yield client.session
            finally:
                self._client = None
                if listener is not None:
                    listener.cancel()
                    with contextlib.suppress(BaseException):
                        await listener

    def _listen(self, client: Client) -> asyncio.Task[None] | None:
        """On a current (2026-07-28) connection to a server whose tool or prompt list
        changes, the ``subscriptions/listen`` stream its changes come on (a 2025-era
        server sends them unasked)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return None
        capabilities = client.server_capabilities
        tools = self._on_tools_changed is not None and _changes(capabilities.tools)
        prompts = self._on_prompts_changed is not None and _changes(capabilities.prompts)
        if not tools and not prompts:
            return None
        return asyncio.get_running_loop().create_task(
            self._listening(client, tools=tools, prompts=prompts),
            name=f"mcp-listen:{self.owner.id}:{self.name}",
        )

    async def _listening(self, client: Client, *, tools: bool, prompts: bool) -> None:
        from mcp.shared.subscriptions import PromptsListChanged, ToolsListChanged

        try:
            async with client.listen(
                tools_list_changed=tools, prompts_list_changed=prompts
            ) as subscription:
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        self._tools_changed()
                    elif isinstance(event, PromptsListChanged):
                        self._prompts_changed()
        except Exception as exc:
            if not self._closing:
                log.warning(
                    "mcp server %s: its subscriptions/listen stream ended: %s",
                    self.name,
                    _describe(exc),
                )

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        spec = self.spec
        if isinstance(spec, StdioServer):
            self._process = await StdioProcess.spawn(
                spec,
                cwd=self._cwd,
                guard=self._guard,
                label=f"mcp:{spec.name}:{self.owner.id}",
                max_message_bytes=self._settings.max_message_bytes,
                sandbox=self._sandbox,
            )
            async with self._process.streams() as streams:
                yield streams
        elif spec.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            from tether.mcp.oauth import scope_challenges

            # The SDK's own defaults: a response stream may stay open for minutes.
            timeout = httpx2.Timeout(30.0, read=300.0)
            transport = scope_challenges(spec.name, httpx2.AsyncHTTPTransport())
            async with (
                httpx2.AsyncClient(
                    headers=dict(spec.headers),
                    timeout=timeout,
                    auth=self._auth,
                    transport=transport,
                ) as http,
                streamable_http_client(spec.url, http_client=http) as (read, write),
            ):
                yield read, write
        else:
            from tether.mcp.oauth import sse_streams

            async with sse_streams(spec.name, spec.url, dict(spec.headers), self._auth) as (
                read,
                write,
            ):
                yield read, write

    async def _on_message(self, message: object) -> None:
        """The SDK's handler of what the server sends unasked: a changed tool or prompt
        list is reported to ``on_tools_changed`` or ``on_prompts_changed`` (which must
        not wait for the server: this runs in the loop that reads its answers)."""
        import mcp_types as types

        if isinstance(message, types.ToolListChangedNotification):
            self._tools_changed()
        elif isinstance(message, types.PromptListChangedNotification):
            self._prompts_changed()
        elif isinstance(message, types.ElicitCompleteNotification):
            self._elicitation_completed(message.params.elicitation_id)

    def _elicitation_completed(self, elicitation_id: str) -> None:
        """The server says URL question ``elicitation_id`` is done with: reported to
        ``completed`` once, and only for a question of its the person accepted (any
        other id is ignored: a server cannot make tether say what it never asked)."""
        elicitation = self._accepted_urls.pop(elicitation_id, None)
        if elicitation is None or self._completed is None:
            log.debug("mcp server %s: completion of %r ignored", self.name, elicitation_id)
            return
        try:
            self._completed(elicitation)
        except Exception:
            log.exception("mcp server %s: reporting a completed elicitation failed", self.name)

    def _tools_changed(self) -> None:
        self._report_change("tool", self._on_tools_changed)

    def _prompts_changed(self) -> None:
        self._report_change("prompt", self._on_prompts_changed)

    def _report_change(self, kind: str, report: Callable[[McpConnection], None] | None) -> None:
        if report is None or self._closing:
            return
        log.info("mcp server %s: its %s list changed", self.name, kind)
        try:
            report(self)
        except Exception:
            log.exception("mcp server %s: reporting its new %s list failed", self.name, kind)

    async def _on_elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """``elicitation/create``: the person's answer (see the module docs)."""
        import mcp_types as types

        elicit = self._elicit
        assert elicit is not None  # only then is this the callback
        calls = list(self._calls.values())
        asked = uuid.uuid4().hex[:12]
        fields: tuple[FormField, ...] = ()
        schema: dict[str, Any] = {}
        if isinstance(params, types.ElicitRequestURLParams):
            url: str | None = params.url
            # A question in an input_required result (2026-07-28) comes without the
            # id a 2025 server's elicitation/create carries; tether's own id stands in.
            elicitation_id: str | None = params.elicitation_id or f"tether-{asked}"
        else:
            url = elicitation_id = None
            schema = dict(params.requested_schema)
            try:
                fields = read_schema(schema)
            except ElicitationSchemaError as exc:
                log.warning("mcp server %s: an elicitation was refused: %s", self.name, exc)
                return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
        signal = CancelSignal()
        elicitation = Elicitation(
            id=asked,
            server=self.name,
            message=params.message,
            mode="form" if url is None else "url",
            signal=signal,
            fields=fields,
            schema=schema,
            url=url,
            elicitation_id=elicitation_id,
            call_id=calls[0] if len(calls) == 1 else None,
            within=self._settings.elicitation_timeout,
        )
        self._asking.add(signal)
        try:
            if self._closing:
                signal.cancel("the server is being stopped")
            asking = asyncio.ensure_future(elicit(elicitation))
            try:
                answer = await asyncio.shield(asking)
            except asyncio.CancelledError:
                # A current server's question is asked inside the call's own task (its
                # input_required round): the call's cancel withdraws it, and the answer
                # (cancel) is logged before the call is over.
                signal.cancel("the call was cancelled")
                await asyncio.wait({asking}, timeout=WITHDRAW_WAIT)
                raise
        finally:
            self._asking.discard(signal)
        if url is not None and elicitation_id is not None and answer.action.value == "accept":
            self._keep_accepted(elicitation_id, elicitation)
        content: dict[str, str | int | float | bool | list[str] | None] | None = (
            None if answer.content is None else dict(answer.content)
        )
        return types.ElicitResult(action=answer.action.value, content=content)

    def _keep_accepted(self, elicitation_id: str, elicitation: Elicitation) -> None:
        """Wait for the server's word that accepted URL question ``elicitation_id`` is done
        with, forgetting the oldest beyond :data:`ACCEPTED_URLS_KEPT`."""
        self._accepted_urls[elicitation_id] = elicitation
        while len(self._accepted_urls) > ACCEPTED_URLS_KEPT:
            del self._accepted_urls[next(iter(self._accepted_urls))]

    def _withdraw(self, reason: str) -> None:
        """Withdraw every question of the server still open (answered ``cancel``)."""
        for signal in list(self._asking):
            signal.cancel(reason)

    def _running(self) -> ClientSession:
        """The session with the running server.

        Raises:
            McpUnavailableError: the server is not running.
        """
        session = self._session
        if session is None or self.lost is not None:
            raise McpUnavailableError(f"MCP server {self.name!r} is not running: {self.lost}")
        return session

    async def list_tools(self) -> list[types.Tool]:
        """Read the server's tools again (every page).

        Raises:
            McpUnavailableError: the server is not running.
            McpStartError: the listing never ends.
            MCPError (the SDK's): the server answered with an error.
        """
        session = self._running()
        return await _list_tools(session)

    # -- resources -------------------------------------------------------------------

    @property
    def offers_resources(self) -> bool:
        """Whether the running server declared the ``resources`` capability."""
        client = self._client
        return client is not None and client.server_capabilities.resources is not None

    async def list_resources(self) -> list[types.Resource]:
        """The server's resources (every page of ``resources/list``).

        Raises:
            McpUnavailableError: the server is not running.
            McpStartError: the listing never ends.
            MCPError (the SDK's): the server answered with an error.
        """
        session = self._running()
        pages = await _every_page(session.list_resources, "resources/list")
        return [resource for page in pages for resource in page.resources]

    async def read_resource(self, uri: str, signal: CancelSignal) -> types.ReadResourceResult:
        """``resources/read`` of ``uri``: the answer, or an error when ``signal`` is
        cancelled first (the request is abandoned).

        Raises:
            McpUnavailableError: the server is not running.
            Cancelled: ``signal`` was cancelled.
            MCPError (the SDK's): the server answered with an error (an unknown resource).
        """
        session = self._running()
        answer = asyncio.ensure_future(session.read_resource(uri))
        cancelled = asyncio.ensure_future(signal.wait())
        try:
            await asyncio.wait((answer, cancelled), return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not answer.done():
            answer.cancel()
            await asyncio.gather(answer, return_exceptions=True)
            raise Cancelled(signal.reason or "cancelled")
        return answer.result()

    # -- prompts ---------------------------------------------------------------------

    @property
    def offers_prompts(self) -> bool:
        """Whether the running server declared the ``prompts`` capability."""
        client = self._client
        return client is not None and client.server_capabilities.prompts is not None

    async def list_prompts(self) -> list[types.Prompt]:
        """The server's prompts (every page of ``prompts/list``).

        Raises:
            McpUnavailableError: the server is not running.
            McpStartError: the listing never ends.
            MCPError (the SDK's): the server answered with an error.
        """
        session = self._running()
        pages = await _every_page(session.list_prompts, "prompts/list")
        return [prompt for page in pages for prompt in page.prompts]

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> types.GetPromptResult:
        """``prompts/get`` of prompt ``name`` with ``arguments``.

        Raises:
            McpUnavailableError: the server is not running.
            MCPError (the SDK's): the server answered with an error (an unknown prompt).
        """
        session = self._running()
        return await session.get_prompt(name, arguments)

    # -- calls -----------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        signal: CancelSignal,
        call_id: str | None = None,
    ) -> types.CallToolResult:
        """Call ``tool`` with ``arguments``; see the module docs for cancel.

        Raises:
            McpUnavailableError: the server is not running.
            Cancelled: ``signal`` was cancelled (the call is over on tether's side).
            MCPError (the SDK's), pydantic.ValidationError, RuntimeError: the server
                answered with an error, with a result that is not a valid one, or with
                structured content its output schema refuses.
        """
        session = self._running()
        # The call's trace context (set with telemetry on), where the spec keeps it.
        traced = CONTEXT_ENV.get().get("TRACEPARENT")
        meta: dict[str, Any] | None = None if traced is None else {"traceparent": traced}
        # The client's call drives a current server's input_required rounds (its
        # questions go to the elicitation callback) where the session's would not.
        caller = session if self._client is None else self._client
        answer = asyncio.ensure_future(
            caller.call_tool(
                tool,
                arguments,
                read_timeout_seconds=self._settings.call_timeout,
                meta=cast("RequestParamsMeta", meta),
            )
        )
        cancelled = asyncio.ensure_future(signal.wait())
        self._calls[signal] = call_id
        try:
            await asyncio.wait({answer, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                self._withdraw("the call was cancelled")
                await self._cancel(session, answer, tool)
                raise Cancelled(signal.reason)
            failure = answer.exception()
            if failure is not None and await self._died():
                raise McpUnavailableError(
                    f"MCP server {self.name!r} {self.lost} (during the call)"
                ) from None
            return answer.result()
        finally:
            self._calls.pop(signal, None)
            cancelled.cancel()
            if not answer.done():
                answer.cancel()
            await asyncio.gather(answer, cancelled, return_exceptions=True)

    async def _died(self) -> bool:
        """Whether the server is gone (a failed call may be the first sign of an exit)."""
        process = self._process
        if process is not None and not self._closing:
            await asyncio.wait([process.exited], timeout=self._settings.cancel_grace)
            if process.exited.done():
                self._lose(self._exit_reason())
        return self.lost is not None

    async def _cancel(self, session: ClientSession, answer: asyncio.Future[Any], tool: str) -> None:
        """Tell the server; stop it if it shows no sign of having heard (module docs)."""
        if await self._honours_cancel(session, answer):
            return
        log.warning(
            "mcp server %s did not honour the cancellation of %s within %g s",
            self.name,
            tool,
            self._settings.cancel_grace,
        )
        if self._process is not None:
            self._lose(f"was stopped: it did not honour the cancellation of a {tool} call")
            await self._process.stop(self._settings.kill_grace)

    async def _honours_cancel(self, session: ClientSession, answer: asyncio.Future[Any]) -> bool:
        """Abandon the call (the SDK tells the server) and probe the server: whether it
        answers within the grace."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        answer.cancel()  # the SDK sends notifications/cancelled (or closes the stream)
        await asyncio.gather(answer, return_exceptions=True)
        try:
            async with asyncio.timeout(self._settings.cancel_grace):
                version = session.protocol_version
                if version in MODERN_PROTOCOL_VERSIONS:
                    await session.send_discover(version)  # the current protocol has no ping
                else:
                    await session.send_ping()
            return True
        except TimeoutError:
            return False
        except Exception:
            log.debug("mcp server %s: the probe after a cancel failed", self.name, exc_info=True)
            return False

    # -- loss ------------------------------------------------------------------------

    def _lose(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        if self._closing:
            return
        log.warning("mcp server %s (session %s) %s", self.name, self.owner.id, reason)
        if self._on_lost is not None:
            try:
                self._on_lost(self, reason)
            except Exception:
                log.exception("mcp server %s: reporting its loss failed", self.name)

    def _exit_reason(self) -> str:
        process = self._process
        if process is None:
            return "closed its connection"
        if process.fault is not None:
            return process.fault
        return process.describe_exit()


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    pages = await _every_page(session.list_tools, "tools/list")
    return [tool for page in pages for tool in page.tools]


def _changes(capability: object) -> bool:
    """Whether a server's ``tools`` or ``prompts`` capability says its list changes."""
    return bool(getattr(capability, "list_changed", False))


class _Page(Protocol):
    @property
    def next_cursor(self) -> str | None: ...


_P = TypeVar("_P", bound=_Page)


async def _every_page(
    fetch: Callable[..., Awaitable[_P]], method: str, limit: int = 1000
) -> list[_P]:
    """Every page of a paginated listing ``method`` (``fetch(params=…)``), following
    its cursor.

    Raises:
        McpStartError: the listing did not end after ``limit`` pages.
    """
    from mcp_types import PaginatedRequestParams

    pages: list[_P] = []
    cursor: str | None = None
    for _ in range(limit):
        page = await fetch(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        pages.append(page)
        cursor = page.next_cursor
        if not cursor:
            return pages
    raise McpStartError(f"its {method} did not end after {limit} pages")


async def _exit_seen(process: StdioProcess | None, within: float = 1.0) -> None:
    """Give a server whose connection closed during start-up ``within`` seconds to be
    seen exiting: its connection may close before its exit is reaped, and its exit
    status is the better reason."""
    if process is None or process.exited.done():
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.exited), within)


def _start_error(exc: Exception, process: StdioProcess | None) -> Exception:
    if isinstance(exc, McpStartError):
        return exc
    if process is not None and process.exited.done():
        return McpStartError(f"it {process.describe_exit()}")
    return McpStartError(f"it could not be initialized: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

"""Session events as ACP ``session/update`` payloads.

One mapping serves both the live stream and the replay of ``session/load``,
so a replayed session shows exactly what was streamed live:

===================  ==========================================================
event                update
===================  ==========================================================
``assistant/chunk``  ``agent_message_chunk`` (text) or ``agent_thought_chunk``
                     (reasoning), one per streamed delta; the chunks of one
                     message share a ``messageId``, ``agent-<seq>`` with the
                     seq of its first chunk (the same live and on a replay)
``user/message``     ``user_message_chunk``, one per content block — on replay;
                     live only for input the client did not type itself
                     (notices, plugins), since the client shows its own prompts;
                     the session's first text also gives its title, a
                     ``session_info_update`` (see :mod:`tether.acp.lifecycle`)
``tool/call``        ``tool_call`` (status ``pending``) with the title, kind and
                     locations the tool declares
                     (:mod:`tether.tools.presentation`): for ``bash`` the
                     command and ``execute``, for the file tools ``read``,
                     ``edit`` or ``search`` and the file as a location
``tool/result``      ``tool_call_update`` with status ``completed`` or
                     ``failed`` and the output as content (after the diff of
                     a completed edit), then each image it carries as
                     ``image`` content; live, to a client that shows
                     notices, a ``notice`` (warning) for each note of the
                     sandbox's that says the command was denied an access
``llm/retry``        live only: a ``notice`` (warning) when the client shows
                     notices (``clientCapabilities.session.notices``), else
                     an ``agent_message_chunk`` on a line of its own
                     (``[retrying: …, attempt 2/5]``), explaining the
                     repeated text; a replay leaves out the abandoned
                     attempt's chunks instead (:mod:`tether.session.attempts`)
``context/compacted``  ``compaction_update`` (``completed``, the summary as
                     text, id ``compaction-<seq>``), live and on a replay,
                     when the client takes them
                     (``clientCapabilities.session.compaction``); else live
                     only, a ``notice`` (info) or an ``agent_message_chunk``
``budget/exhausted`` the line that says which budget ran out: live, a
                     ``notice`` (warning) to a client that shows notices,
                     else an ``agent_message_chunk`` (also on a replay: it
                     is why the prompt ended ``max_turn_requests``)
``llm/prompt-cut``   the line that says the model server dropped the front of
                     the prompt (:mod:`tether.session.prompt_cut`): live, a
                     ``notice`` (warning) to a client that shows notices,
                     else an ``agent_message_chunk`` (also on a replay: it
                     explains the answer that followed)
``tool/previewed``   on a replay only: the ``tool_call_update`` that showed the
                     call's preview live (kind, title, locations, diffs), so
                     a loaded session shows an edit's diff as it was shown; a
                     diff the log kept shortened is followed by a note
``plan/updated``     ``plan``, with every entry (content, priority, status)
``session/title``    ``session_info_update`` with the title a model wrote
``turn/end``         for a client that takes the ``cancelled`` tool call status
                     (protocol version 2), when the turn ended cancelled: a
                     ``tool_call_update`` with status ``cancelled`` for each of
                     its calls that did not complete (an upsert of the call
                     already shown ``pending``, ``in_progress`` or ``failed``)
===================  ==========================================================

With a :class:`~tether.acp.usage.UsageMeter`, an ``assistant/message`` that
carries usage figures is shown as a ``usage_update`` (tokens in context, the
context window, the session's cost), live and on a replay alike.

Live, the bridge adds a ``tool_call_update`` with what the tool's preview
says (:mod:`tether.tools.preview`: kind, title, locations with lines, and
``diff`` content for an edit) before any permission request — recording it
as ``tool/previewed``, which a replay shows in its place — and one with
status ``in_progress`` when a call is cleared to run, and while a command runs
locally, its progress (``tool/progress``, never stored: a replay shows only
the result) as the call's content: the last lines of its output and how long
it has run (:meth:`UpdateMapper.progress`). Tool call ids are
``<turn>:<call id>``, unique in the session even if a provider reuses call ids
across turns.

The updates are built as the JSON the wire carries (the ACP schema's field
names, no nulls), not as the SDK's models: a replay of a long session sends
tens of thousands of them, and building and dumping a model for each cost
more than everything else of ``session/load``. A test checks every kind of
update against the SDK's models (it validates, and serializes back equal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast, get_args

import msgspec

from tether.acp.lifecycle import iso_time
from tether.acp.wire import ToolCallUpdate
from tether.content import ImageRef, TextBlock
from tether.frozen import thaw
from tether.persist.backends.summary import title_from
from tether.session import (
    Aborted,
    AssistantChunk,
    ContextCompacted,
    Event,
    RetryEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.attempts import retry_notice
from tether.session.budget import BudgetExhausted
from tether.session.compaction import compaction_notice
from tether.session.previews import PreviewLocation, ToolPreviewed, stored_diff
from tether.session.prompt_cut import PromptCut, prompt_cut_notice
from tether.session.settings import PlanEntry, PlanUpdated, SessionTitled
from tether.shell.sandbox import denials_in
from tether.tools.preview import Diff, Location, ToolPreview
from tether.tools.preview import ToolKind as PreviewKind
from tether.tools.progress import ToolProgress
from tether.tools.registry import Shown, shown_in

if TYPE_CHECKING:
    from tether.acp.usage import UsageMeter

SessionUpdate = dict[str, object]
"""The ``update`` of one ``session/update`` notification, as its JSON."""

CLIENT_SOURCE = "user"
"""The ``source`` of messages a person typed (the client already shows those)."""

_PREVIEW_KINDS: frozenset[str] = frozenset(get_args(PreviewKind))


class UpdateMapper:
    """Maps the events of one session, in order, to the updates that show them.

    ``live`` leaves out the client's own prompts. ``turn`` is the session's
    last turn when mapping starts part way through it (a live session
    continuing after a replay). ``meter`` (already holding the events before
    that point) turns usage figures into ``usage_update``. ``cwd`` (the
    session's) makes relative paths of locations absolute. ``shown`` is how
    the session's tools are shown (by default as tools that declare
    nothing). ``notices`` and ``compaction`` say the client takes ``notice`` and
    ``compaction_update`` updates (its ``session`` capabilities). ``echo`` shows the
    client's own prompts live too, and ``cancelled_calls`` marks the calls a cancelled
    turn did not complete ``cancelled`` (both protocol version 2).
    """

    __slots__ = (
        "_cancelled_calls",
        "_compaction",
        "_cwd",
        "_echo",
        "_kept",
        "_live",
        "_message",
        "_meter",
        "_notices",
        "_shown",
        "_titled",
        "_turn",
        "_unfinished",
    )

    def __init__(
        self,
        *,
        live: bool,
        turn: int = 0,
        meter: UsageMeter | None = None,
        titled: bool = False,
        cwd: str | None = None,
        shown: Shown | None = None,
        notices: bool = False,
        compaction: bool = False,
        echo: bool = False,
        cancelled_calls: bool = False,
    ) -> None:
        self._live = live
        self._notices = notices
        self._compaction = compaction
        self._echo = echo
        self._cancelled_calls = cancelled_calls
        self._unfinished: dict[str, None] = {}
        """The ACP ids of the current turn's calls that did not complete, in call order."""
        self._message: tuple[str, str] | None = None
        """The update kind and id of the agent message being streamed, if any."""
        self._shown = shown if shown is not None else shown_in(None)
        self._turn = turn
        self._meter = meter
        self._titled = titled
        self._cwd = cwd
        self._kept: dict[str, list[dict[str, object]]] = {}
        """Content shown while a call ran that its final update keeps: diffs, a terminal."""

    def updates(self, event: Event) -> tuple[SessionUpdate, ...]:
        """The updates that show ``event`` (none for bookkeeping events)."""
        meter = self._meter
        if meter is not None and meter.advance(event):
            usage = meter.update()
            return () if usage is None else (usage,)
        payload = event.payload
        if isinstance(payload, AssistantChunk):
            kind = "agent_message_chunk" if payload.kind == "text" else "agent_thought_chunk"
            if self._message is None or self._message[0] != kind:
                self._message = (kind, f"agent-{event.seq}")
            chunk = {"sessionUpdate": kind, "content": _text(payload.delta)}
            return ({**chunk, "messageId": self._message[1]},)
        # Anything else between chunks ends the message they were part of.
        self._message = None
        if isinstance(payload, ToolCallEvent):
            self._unfinished[self.tool_call_id(payload.id)] = None
            return (self._tool_call(payload),)
        if isinstance(payload, ToolResultEvent):
            if not payload.is_error:
                self._unfinished.pop(self.tool_call_id(payload.id), None)
            result = self._tool_result(payload)
            if not (self._live and self._notices):
                return (result,)
            denied = tuple(
                notice("warning", "The sandbox denied an access", note)
                for note in denials_in(payload.content)
            )
            return (result, *denied)
        if isinstance(payload, UserMessageEvent):
            shown: tuple[SessionUpdate, ...] = ()
            if self._echo or not (self._live and payload.source == CLIENT_SOURCE):
                shown = tuple(
                    {
                        "sessionUpdate": "user_message_chunk",
                        "content": _content_block(block),
                        "messageId": payload.id,
                    }
                    for block in payload.content
                )
            if not self._titled:
                title = title_from(b.text for b in payload.content if isinstance(b, TextBlock))
                if title is not None:
                    self._titled = True
                    info = {"title": title, "updatedAt": iso_time(event.time)}
                    shown += ({"sessionUpdate": "session_info_update", **info},)
            return shown
        if isinstance(payload, ContextCompacted) and self._compaction:
            # A timeline entry the client keeps: shown where it happened, in a replay too.
            return (compaction_update(f"compaction-{event.seq}", payload.summary),)
        if isinstance(payload, RetryEvent | ContextCompacted):
            # Live news of what the loop did; a replay shows the conversation only.
            if not self._live:
                return ()
            if isinstance(payload, RetryEvent):
                line, title, severity = retry_notice(event.data), "Retrying", "warning"
            else:
                line, title, severity = compaction_notice(event.data), "Context compacted", "info"
            return (self._notice(event, severity, title, line),)
        if isinstance(payload, BudgetExhausted | PromptCut):
            # Part of how the turn went, in a replay too: the receipt of the request not
            # sent (why the prompt ends max_turn_requests), or the prompt the server cut
            # (why the answer that followed lost the instructions).
            if isinstance(payload, BudgetExhausted):
                title, said = "Budget exhausted", f"({payload.describe()})"
            else:
                title, said = "The prompt was cut", prompt_cut_notice(event.data)
            if self._live:
                return (self._notice(event, "warning", title, said),)
            return (agent_line(said, f"agent-{event.seq}"),)
        if isinstance(payload, ToolPreviewed):
            # Live, the bridge showed the preview itself, whole (see record.show_preview).
            return () if self._live else (self._replayed_preview(payload),)
        if isinstance(payload, PlanUpdated):
            return (plan_update(payload.entries),)
        if isinstance(payload, SessionTitled):
            info = {"title": payload.title, "updatedAt": iso_time(event.time)}
            return ({"sessionUpdate": "session_info_update", **info},)
        if isinstance(payload, TurnStart):
            self._turn = payload.turn
            self._unfinished.clear()
        if isinstance(payload, TurnEnd):
            return self._turn_ended(payload)
        return ()

    def _turn_ended(self, end: TurnEnd) -> tuple[SessionUpdate, ...]:
        """A cancelled turn's calls that did not complete, as ``cancelled`` (when the
        client takes that status)."""
        unfinished, self._unfinished = self._unfinished, {}
        if not (self._cancelled_calls and isinstance(end.reason, Aborted)):
            return ()
        return tuple(
            {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "cancelled"}
            for call in unfinished
        )

    def _notice(self, event: Event, severity: str, title: str, line: str) -> SessionUpdate:
        """``line`` as a ``notice`` to a client that shows notices, else as a message."""
        if self._notices:
            return notice(severity, title, line)
        return agent_line(line, f"agent-{event.seq}")

    def tool_call_id(self, call_id: str) -> str:
        """The ACP id of call ``call_id`` of the current turn."""
        return f"{self._turn}:{call_id}"

    def started(self, call_id: str) -> SessionUpdate:
        """The update saying call ``call_id`` is cleared to run."""
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.tool_call_id(call_id),
            "status": "in_progress",
        }

    def previewed(self, call_id: str, preview: ToolPreview) -> SessionUpdate:
        """The update showing ``preview`` of call ``call_id``; its diffs are kept for its end."""
        update: SessionUpdate = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.tool_call_id(call_id),
            **_preview_fields(preview),
        }
        diffs = _diff_content(preview)
        if diffs:
            self._kept[self.tool_call_id(call_id)] = diffs
        return update

    def _replayed_preview(self, stored: ToolPreviewed) -> SessionUpdate:
        """The preview update as the client saw it live, from its stored form; a
        diff stored shortened is followed by a note that says so."""
        kind = stored.kind if stored.kind in _PREVIEW_KINDS else "other"
        preview = ToolPreview(
            kind=cast(PreviewKind, kind),
            title=stored.title,
            locations=tuple(Location(loc.path, loc.line) for loc in stored.locations),
            # A change too big to keep was stored without its texts: only its note shows.
            diffs=tuple(
                Diff(d.path, d.old_text, d.new_text)
                for d in stored.diffs
                if d.shortened is None or d.new_text or d.old_text
            ),
        )
        update = self.previewed(stored.id, preview)
        notes: list[dict[str, object]] = [
            {"type": "content", "content": _text(f"[{d.shortened}]")}
            for d in stored.diffs
            if d.shortened is not None
        ]
        if notes:
            content = cast(list[dict[str, object]], update.get("content", []))
            update["content"] = [*content, *notes]
            self._kept[self.tool_call_id(stored.id)] = [*content, *notes]
        return update

    def progress(self, progress: ToolProgress) -> SessionUpdate:
        """The update showing a running call's progress as its content: the last lines of
        its output, then ``[running 12 s]``; the call's result replaces it."""
        running = f"[running {int(progress.elapsed)} s]"
        text = "\n".join([*progress.tail, running])
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.tool_call_id(progress.call_id),
            "content": [{"type": "content", "content": _text(text)}],
        }

    def terminal(self, call_id: str, terminal_id: str) -> SessionUpdate:
        """The update showing the client's terminal that runs call ``call_id``; kept for its end."""
        content: list[dict[str, object]] = [{"type": "terminal", "terminalId": terminal_id}]
        self._kept[self.tool_call_id(call_id)] = content
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.tool_call_id(call_id),
            "content": content,
        }

    def pending(
        self,
        call_id: str,
        tool: str,
        arguments: Mapping[str, object],
        preview: ToolPreview | None = None,
    ) -> ToolCallUpdate:
        """The tool call as shown in a permission request (the connection sends that one)."""
        fields: dict[str, object] = {
            "toolCallId": self.tool_call_id(call_id),
            **self._call_fields(tool, arguments),
        }
        if preview is not None:
            fields.update(_preview_fields(preview))
        return msgspec.convert(fields, ToolCallUpdate)

    def _tool_call(self, call: ToolCallEvent) -> SessionUpdate:
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": self.tool_call_id(call.id),
            **self._call_fields(call.name, call.arguments),
        }

    def _call_fields(self, tool: str, arguments: Mapping[str, object]) -> dict[str, object]:
        """Title, kind, status, raw input and locations of a pending call, as its tool
        declares them."""
        shown = self._shown(tool)
        fields: dict[str, object] = {
            "title": shown.title_of(tool, arguments),
            "kind": shown.kind,
            "status": "pending",
            "rawInput": thaw(arguments),
        }
        locations = [
            {"path": loc.path} if loc.line is None else {"path": loc.path, "line": loc.line}
            for loc in shown.locations(arguments, self._cwd)
        ]
        if locations:
            fields["locations"] = locations
        return fields

    def _tool_result(self, result: ToolResultEvent) -> SessionUpdate:
        call_id = self.tool_call_id(result.id)
        update: SessionUpdate = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call_id,
            "status": "failed" if result.is_error else "completed",
        }
        kept = self._kept.pop(call_id, [])
        # A failed edit changed nothing: its diff (and a note on it) goes; a
        # terminal stays whatever happened.
        if result.is_error:
            kept = [item for item in kept if item["type"] == "terminal"]
        content = kept
        if result.content:
            content = [*content, {"type": "content", "content": _text(result.content)}]
        if result.images:
            shown: list[dict[str, object]] = [
                {"type": "content", "content": _content_block(i)} for i in result.images
            ]
            content = [*content, *shown]
        if content:
            update["content"] = content
        return update


def plan_update(entries: Sequence[PlanEntry]) -> SessionUpdate:
    """The ``plan`` update showing ``entries`` (the client replaces its plan with it)."""
    return {
        "sessionUpdate": "plan",
        "entries": [
            {"content": entry.content, "priority": entry.priority, "status": entry.status}
            for entry in entries
        ],
    }


def notice(severity: str, title: str, description: str) -> SessionUpdate:
    """A ``notice`` update: live news for the person (``info``, ``warning``, ``error``),
    sent only to a client that advertised ``session.notices``."""
    return {
        "sessionUpdate": "notice",
        "severity": severity,
        "title": title,
        "description": description,
    }


def agent_line(text: str, message_id: str) -> SessionUpdate:
    """``text`` on a line of its own as an agent message of its own."""
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": _text(f"\n{text}\n"),
        "messageId": message_id,
    }


def compaction_update(compaction_id: str, summary: str) -> SessionUpdate:
    """A finished compaction, with its summary, for a client that advertised
    ``session.compaction``."""
    update: SessionUpdate = {
        "sessionUpdate": "compaction_update",
        "compactionId": compaction_id,
        "status": "completed",
    }
    if summary:
        update["summary"] = [_text(summary)]
    return update


def _preview_fields(preview: ToolPreview) -> dict[str, object]:
    """The fields of a tool call a preview sets: kind, title, locations, diff content."""
    fields: dict[str, object] = {"kind": preview.kind, "title": preview.title}
    if preview.locations:
        fields["locations"] = [
            {"path": loc.path} if loc.line is None else {"path": loc.path, "line": loc.line}
            for loc in preview.locations
        ]
    diffs = _diff_content(preview)
    if diffs:
        fields["content"] = diffs
    return fields


def stored_preview(call_id: str, preview: ToolPreview) -> ToolPreviewed:
    """``tool/previewed``: ``preview`` of call ``call_id`` as the log keeps it (a huge
    diff shortened, see :mod:`tether.session.previews`)."""
    return ToolPreviewed(
        id=call_id,
        kind=preview.kind,
        title=preview.title,
        locations=tuple(PreviewLocation(loc.path, loc.line) for loc in preview.locations),
        diffs=tuple(stored_diff(d.path, d.old_text, d.new_text) for d in preview.diffs),
    )


def _diff_content(preview: ToolPreview) -> list[dict[str, object]]:
    content: list[dict[str, object]] = []
    for diff in preview.diffs:
        entry: dict[str, object] = {"type": "diff", "path": diff.path, "newText": diff.new_text}
        if diff.old_text is not None:
            entry["oldText"] = diff.old_text
        content.append(entry)
    return content


def _text(text: str) -> dict[str, object]:
    return {"type": "text", "text": text}


def _content_block(block: TextBlock | ImageRef) -> dict[str, object]:
    if isinstance(block, TextBlock):
        return _text(block.text)
    header, comma, data = block.url.partition(",")
    if block.url.startswith("data:") and comma and header.endswith(";base64"):
        mime = header[len("data:") : -len(";base64")] or block.mime_type or "image/png"
        return {"type": "image", "data": data, "mimeType": mime}
    link: dict[str, object] = {"type": "resource_link", "name": "image", "uri": block.url}
    if block.mime_type is not None:
        link["mimeType"] = block.mime_type
    return link

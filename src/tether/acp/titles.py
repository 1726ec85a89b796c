"""Session titles a model writes (``tether acp --title-model MODEL``).

Right after a session's first prompt is logged, the bridge sends the
heuristic title (the prompt's text, :mod:`tether.acp.lifecycle`) and, with a
title model configured, asks that model for a short title in a request of its
own: the prompt's text (its first 2,000 characters), a system prompt asking
for at most six words, at most 32 output tokens. The answer's first line,
without quotes or a final period and cut to 80 characters, is logged as
``session/title`` and sent as ``session_info_update``; ``session/list`` and
``tether sessions list`` show it from then on.

The request is not part of the conversation (the model of the session never
sees it) and costs tokens of its own, which are not counted in the session's
usage. A model that fails, refuses or answers nothing leaves the heuristic
title; the failure is logged, never shown as an error. Closing the session or
the connection cancels a request still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from tether.content import TextBlock, UserRoleMessage
from tether.llm.assemble import Assembler
from tether.llm.request import ModelRequest
from tether.llm.service import LLM
from tether.loop.budget import BUDGETS, drawing_on
from tether.persist.backends.summary import title_from
from tether.runtime import CancelSignal
from tether.session.settings import SessionTitled
from tether.session.store import SESSIONS

if TYPE_CHECKING:
    from tether.acp.record import SessionRecord
    from tether.front.host import SessionHost
    from tether.llm.service import LlmView
    from tether.runtime import Context

__all__ = ["TITLE_SYSTEM", "Namer", "generate_title"]

log = logging.getLogger(__name__)

TITLE_SYSTEM = (
    "You name conversations. Answer with a title of at most six words for the "
    "conversation that starts with the user's message, and nothing else."
)
_QUOTES = "\"'\u201c\u201d\u2018\u2019"
"""Quotes a model may put around its title."""

PROMPT_LIMIT = 2000
"""Characters of the first prompt the title model reads."""


async def generate_title(llm: LlmView, model: str, prompt: str, signal: CancelSignal) -> str | None:
    """A title for a session that starts with ``prompt``; ``None`` if ``model`` gave none."""
    try:
        request = ModelRequest(
            model=model,
            messages=(UserRoleMessage((TextBlock(prompt[:PROMPT_LIMIT]),)),),
            system=TITLE_SYSTEM,
            max_tokens=32,
        )
    except ValueError as exc:
        log.warning("title model %r: %s", model, exc)
        return None
    assembler = Assembler()
    async with contextlib.aclosing(llm.stream(request, signal)) as stream:
        async for chunk in stream:
            assembler.feed(chunk)
    answer = assembler.result()
    if answer.finish.reason != "stop":
        log.warning(
            "title model %r gave no title (%s)", model, answer.finish.error or answer.finish.reason
        )
        return None
    text = "".join(b.text for b in answer.message.content if isinstance(b, TextBlock))
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    return title_from([lines[0].strip().strip(_QUOTES).rstrip(".").strip()])


class Namer:
    """Has ``model`` name each session after its first prompt, in a task ``host`` owns.

    The title is logged (``session/title``) if the session is still open then;
    a session closed meanwhile cancels the request (:meth:`cancel`), and so
    does the connection's close (:meth:`cancel_all`). A failure is logged,
    never shown.
    """

    def __init__(self, ctx: Context, host: SessionHost[SessionRecord], model: str) -> None:
        self._ctx = ctx
        self._host = host
        self._model = model
        self._signals: dict[str, CancelSignal] = {}
        """The signals of title requests still running, by session."""

    def __call__(self, record: SessionRecord, prompt: str) -> None:
        llm = self._ctx.get(LLM)
        if self._host.closing or llm is None:
            return
        signal = self._signals[record.id] = CancelSignal()
        budgets = self._ctx.get(BUDGETS)
        gate = None if budgets is None else budgets.gate_of(record.agent.session)

        async def name() -> None:
            try:
                with drawing_on(gate, "title"):
                    title = await generate_title(llm, self._model, prompt, signal)
            finally:
                if self._signals.get(record.id) is signal:
                    del self._signals[record.id]
            if title is None or self._host.get(record.id) is not record:
                return
            if self._ctx.service(SESSIONS).is_live(record.agent.session):
                record.agent.session.append(SessionTitled(title=title))

        task = self._host.spawn(name(), name=f"title:{record.id}")
        task.add_done_callback(_named)

    def cancel(self, session_id: str, reason: str) -> None:
        """Cancel the title request of ``session_id``, if one runs."""
        signal = self._signals.pop(session_id, None)
        if signal is not None:
            signal.cancel(reason)

    def cancel_all(self, reason: str) -> None:
        """Cancel every title request still running."""
        for signal in list(self._signals.values()):
            signal.cancel(reason)


def _named(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        # Nobody awaits a title: its failure is logged here, never shown.
        log.warning("naming a session failed", exc_info=task.exception())

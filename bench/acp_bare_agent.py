"""A bare ACP agent on the official SDK: the reference ``bench_acp.py`` compares
``tether acp``'s start-up with. It answers ``initialize``, creates sessions that hold
nothing, and ends every prompt at once; stdout carries the protocol only."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse

from acp import PROTOCOL_VERSION, run_agent


class BareAgent:
    """The least an agent answers."""

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=uuid.uuid4().hex)

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **_: Any) -> None:
        return None


if __name__ == "__main__":
    asyncio.run(run_agent(BareAgent()))

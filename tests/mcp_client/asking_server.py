"""An MCP server written with the SDK (MCPServer) whose tools ask the person for input, for
the tests: ``python asking_server.py [--legacy]``.

Tools: ``deploy`` (a form: region, replicas, confirm, api_token; answers with the
action and what was filled in), ``sign_in`` (a URL to open; answers with the action),
``sign_in_done`` (2025-era: ``sign_in``, then the server's word that it is done).

On a current connection (2026-07-28) a tool asks the way that version does: its first
answer is an ``input_required`` result carrying the question, and the client's retry
carries the person's answer. With ``--legacy`` it is a 2025-era server (``server/discover``
unknown, the ``initialize`` handshake alone), whose tools send ``elicitation/create``
in the middle of the call.
"""

from __future__ import annotations

import sys
from typing import Any

from legacy_server import make_legacy  # beside this script
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

server = MCPServer("asking")

DEPLOY = "Where should it be deployed?"
SIGN_IN = ("Sign in to continue", "https://login.example.test/device?code=42", "sign-in-1")


class Deployment(BaseModel):
    region: str = Field(description="Where it runs", json_schema_extra={"enum": ["eu", "us"]})
    replicas: int = Field(ge=1, le=5, description="How many copies")
    confirm: bool
    api_token: str


def _current(ctx: Context) -> bool:  # type: ignore[type-arg]
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _answer(ctx: Context, key: str) -> Any:  # type: ignore[type-arg]
    """The client's answer to the question ``key`` of the previous round, if any."""
    answers = ctx.input_responses or {}
    return answers.get(key)


@server.tool()
async def deploy(ctx: Context) -> str | InputRequiredResult:  # type: ignore[type-arg]
    """Ask where to deploy, then say what was answered."""
    if _current(ctx):
        answer = _answer(ctx, "deploy")
        if answer is None:
            schema = Deployment.model_json_schema()
            schema.pop("title", None)
            question = ElicitRequestFormParams(message=DEPLOY, requested_schema=schema)
            return InputRequiredResult(input_requests={"deploy": ElicitRequest(params=question)})
        if answer.action == "accept":
            return f"accept {Deployment.model_validate(answer.content).model_dump_json()}"
        return str(answer.action)
    result = await ctx.elicit(DEPLOY, Deployment)
    if result.action == "accept":
        return f"accept {result.data.model_dump_json()}"
    return result.action


@server.tool()
async def sign_in(ctx: Context) -> str | InputRequiredResult:  # type: ignore[type-arg]
    """Send the person to a sign-in page, then say what they answered."""
    message, url, elicitation_id = SIGN_IN
    if _current(ctx):
        answer = _answer(ctx, "sign_in")
        if answer is None:
            question = ElicitRequestURLParams(
                message=message, url=url, elicitation_id=elicitation_id
            )
            return InputRequiredResult(input_requests={"sign_in": ElicitRequest(params=question)})
        return str(answer.action)
    result = await ctx.elicit_url(message, url, elicitation_id)
    return result.action


@server.tool()
async def sign_in_done(ctx: Context) -> str:  # type: ignore[type-arg]
    """(2025-era) Send the person to a sign-in page, say it is done
    (``notifications/elicitation/complete``) whatever they answered, and of a question
    never asked too; then answer with the action."""
    message, url, elicitation_id = SIGN_IN
    result = await ctx.elicit_url(message, url, elicitation_id)
    await ctx.session.send_elicit_complete(elicitation_id)
    await ctx.session.send_elicit_complete("never-asked")
    return result.action


if __name__ == "__main__":
    if "--legacy" in sys.argv:
        make_legacy(server)
    server.run("stdio")

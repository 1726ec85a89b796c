"""An MCP server written with the SDK (FastMCP) whose tools ask the person for input, for
the tests: ``python asking_server.py``.

Tools: ``deploy`` (a form: region, replicas, confirm, api_token; answers with the
action and what was filled in), ``sign_in`` (a URL to open; answers with the action).
"""

from __future__ import annotations

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field

server = FastMCP("asking")


class Deployment(BaseModel):
    region: str = Field(description="Where it runs", json_schema_extra={"enum": ["eu", "us"]})
    replicas: int = Field(ge=1, le=5, description="How many copies")
    confirm: bool
    api_token: str


@server.tool()
async def deploy(ctx: Context) -> str:  # type: ignore[type-arg]
    """Ask where to deploy, then say what was answered."""
    result = await ctx.elicit("Where should it be deployed?", Deployment)
    if result.action == "accept":
        return f"accept {result.data.model_dump_json()}"
    return result.action


@server.tool()
async def sign_in(ctx: Context) -> str:  # type: ignore[type-arg]
    """Send the person to a sign-in page, then say what they answered."""
    result = await ctx.elicit_url(
        "Sign in to continue", "https://login.example.test/device?code=42", "sign-in-1"
    )
    return result.action


if __name__ == "__main__":
    server.run("stdio")

"""A composed tether whose model is a real adapter talking to the fake server.

Rows: session store, JSONL persistence (in a temporary directory), the llm
service, an adapter plugin pointed at the fake server, the tool registry with
a ``weather`` tool, the agents registry, the retry policy and the agent loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tests.adapters.fake_server import FakeServer
from tests.adapters.support import KEY
from tether.agent import Agent
from tether.agent import registry as agents_plugin
from tether.agent.registry import AGENTS
from tether.llm import service as llm_plugin
from tether.llm.adapters import anthropic as anthropic_plugin
from tether.llm.adapters import openai as openai_plugin
from tether.loop import plugin as loop_plugin
from tether.loop import retry as retry_plugin
from tether.persist import jsonl as jsonl_plugin
from tether.runtime import Context, Runtime
from tether.session.store import apply as store_plugin
from tether.tools import Tool, ToolExec, ToolOutput
from tether.tools import registry as tools_plugin


class WeatherArgs(BaseModel):
    city: str


@dataclass
class AdapterWorld:
    runtime: Runtime
    server: FakeServer
    data_dir: Path
    forecasts: list[str] = field(default_factory=list)

    async def agent(self) -> Agent:
        handle = await self.runtime.ctx.get(AGENTS).create(cwd=str(self.data_dir))
        agent: Agent = handle.agent
        return agent

    def session_file(self, agent: Agent) -> Path:
        return self.data_dir / "sessions" / f"{agent.id}.jsonl"


async def build_world(
    data_dir: Path,
    server: FakeServer,
    *,
    provider: str = "openai-compatible",
    model: str = "openai-compatible:test-model",
    retry: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
    llm: dict[str, Any] | None = None,
    adapter: dict[str, Any] | None = None,
) -> AdapterWorld:
    """The world; ``adapter`` is merged into the adapter plugin's config (timeouts)."""
    runtime = Runtime()
    world = AdapterWorld(runtime, server, data_dir)
    ctx = runtime.ctx
    await ctx.plugin(store_plugin)
    await ctx.plugin(jsonl_plugin, {"data_dir": str(data_dir), "batch_window_ms": 1})
    await ctx.plugin(llm_plugin, llm)
    base_url = f"{server.url}/v1"
    if provider == "anthropic":
        config = {"base_url": base_url, "api_key": KEY, **(adapter or {})}
        await ctx.plugin(anthropic_plugin, config)
    else:
        providers = {provider: {"base_url": base_url, "api_key": KEY}}
        await ctx.plugin(openai_plugin, {"providers": providers, **(adapter or {})})
    await ctx.plugin(tools_plugin)
    await ctx.plugin(agents_plugin)
    if retry is not None:
        await ctx.plugin(retry_plugin, retry)

    async def weather(args: WeatherArgs, exec: ToolExec) -> ToolOutput:
        world.forecasts.append(args.city)
        return ToolOutput(f"sunny in {args.city}")

    async def fixtures(fctx: Context, config: None) -> None:
        await fctx.tools.register(
            Tool(
                name="weather",
                description="Look up the weather.",
                args=WeatherArgs,
                execute=weather,
            )
        )

    fixtures.inject = ("tools",)  # type: ignore[attr-defined]
    await ctx.plugin(fixtures)
    await ctx.plugin(loop_plugin, {"model": model, **(loop or {})})
    return world

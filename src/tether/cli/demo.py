"""``tether demo``: a small tour of the plugin runtime on its embedded defaults.

It composes two plugins from an in-memory composition — a ``greetings``
service and a ``greeter`` that injects it — then withdraws and restores the
service (by a reload of its row) to show the dependent unloading and loading
again, and finally tears
everything down. Each step prints one line to stdout.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.runtime import Context, Runtime
from tether.runtime.compose import Composer, parse_composition
from tether.runtime.keys import ServiceKey

COMPOSITION = {
    "plugins": [
        {"id": "greeter", "plugin": "tether.cli.demo:Greeter"},
        {"id": "greetings", "plugin": "tether.cli.demo:Greetings", "config": {}},
    ]
}


GREETINGS = ServiceKey["Greetings"]("greetings")
"""The demo's service."""


class Greetings:
    """Provides the ``greetings`` service: it counts how often it was asked."""

    name = "greetings"

    def __init__(self, ctx: Context, config: None) -> None:
        self.count = 0
        ctx.provide(GREETINGS, self)

    def greet(self, who: str) -> str:
        self.count += 1
        return f"hello, {who} (greeting #{self.count})"


class Greeter:
    """Injects ``greetings``; loads when it appears, unloads when it goes."""

    name = "greeter"
    inject = ("greetings",)
    say: Callable[[str], None] = print

    def __init__(self, ctx: Context, config: None) -> None:
        self._ctx = ctx

    async def start(self) -> None:
        Greeter.say(f"greeter loaded: {self._ctx.service(GREETINGS).greet('tether')}")
        await self._ctx.effect(lambda: lambda: Greeter.say("greeter unloaded"))


async def run_demo(say: Callable[[str], None] = print) -> None:
    """Run the tour, printing each step through ``say``."""
    Greeter.say = say
    async with Runtime() as runtime:
        composer = Composer(runtime.ctx)
        report = await composer.apply(parse_composition(COMPOSITION, source="demo"))
        for state in composer.rows():
            say(f"row {state.row.id}: {state.status}")
        for problem in report.problems:
            say(str(problem))
        greetings = composer.row("greetings").fiber
        assert greetings is not None
        say("withdrawing the greetings service")
        await greetings.dispose()
        say(f"row greeter: {composer.row('greeter').status}")
        say("reloading the greetings row (fresh code, same config)")
        await composer.reload("greetings")
        say(f"row greeter: {composer.row('greeter').status}")
        say("shutting down")
    say("all plugins disposed")

"""``tether doctor``: is this machine ready? The data directory, and the model.

Each check prints one line, ``ok`` or ``problem``, and what to do about a
problem; the exit status is 0 when every check passed, 1 otherwise. The model
check sends one tiny request (a one-word answer, a few tokens) and reports
how long the answer took.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from tether.cli.boot import (
    PERSISTENCE_ROW,
    ModelChoiceError,
    composed_model,
    data_dir_of,
    row_problem,
    start,
)

if TYPE_CHECKING:
    from tether.host import Tether

EXIT_OK = 0
EXIT_FAILED = 1


def _say(ok: bool, what: str, detail: str) -> None:
    print(f"{'ok     ' if ok else 'problem'}  {what}: {detail}")


async def doctor(args: argparse.Namespace) -> int:
    from tether.runtime.errors import CompositionError

    try:
        tether, model_problem = await _boot(args)
    except CompositionError as exc:
        _say(False, "configuration", f"{exc}; fix the file (`tether config path` lists them)")
        return EXIT_FAILED
    try:
        healthy = await _check_sessions(args, tether)
        if model_problem is not None:
            _say(False, "model", model_problem)
            healthy = False
        else:
            healthy = await _check_model(tether) and healthy
    finally:
        await tether.stop()
    return EXIT_OK if healthy else EXIT_FAILED


async def _boot(args: argparse.Namespace) -> tuple[Tether, str | None]:
    """tether started for the checks, and why the model asked for cannot be
    used (then tether is started without it, so storage is still checked)."""
    try:
        quiet = (PERSISTENCE_ROW,)
        # The model check says what the offline fallback's notice would.
        return await start(args, model=args.model, quiet_rows=quiet, notice=False), None
    except ModelChoiceError as exc:
        tether = await start(args, with_model=False, quiet_rows=(PERSISTENCE_ROW,))
        return tether, str(exc)


async def _check_sessions(args: argparse.Namespace, tether: Tether) -> bool:
    """Whether sessions can be stored where the composition stores them; says so."""
    from tether.cli.failures import describe
    from tether.persist.cluster import CLUSTER
    from tether.persist.service import PERSISTENCE

    cluster = tether.runtime.ctx.get(CLUSTER)
    where = (
        data_dir_of(args)
        if cluster is None
        else f"the PostgreSQL schema {cluster.schema} (as host {cluster.host_id})"
    )
    persistence = tether.runtime.ctx.get(PERSISTENCE)
    if persistence is None:
        reason = row_problem(tether, PERSISTENCE_ROW)
        _say(False, "sessions", f"cannot be stored ({reason}); {_STORAGE_ADVICE}")
        return False
    try:
        await persistence.check_writable()
        count = len(await persistence.list())
    except Exception as exc:
        _say(False, "sessions", f"{where}: {describe(exc) or exc}; {_STORAGE_ADVICE}")
        return False
    _say(True, "sessions", f"{where} is writable ({count} stored)")
    return True


_STORAGE_ADVICE = (
    "give a data directory tether can create and write (--data-dir or TETHER_HOME), "
    "or fix the persistence row of the configuration"
)


async def _check_model(tether: object) -> bool:
    from tether.content import TextBlock, UserRoleMessage
    from tether.host import Tether
    from tether.llm.chunks import Finish, TextDelta
    from tether.llm.offline import PROVIDER as OFFLINE
    from tether.llm.request import ModelRequest, parse_model_ref
    from tether.llm.service import LLM
    from tether.runtime.signal import CancelSignal

    assert isinstance(tether, Tether)
    llm = tether.runtime.ctx.get(LLM)
    model = composed_model(tether)
    if llm is None or model is None:
        _say(False, "model", "no agent loop or model service is composed")
        return False
    if parse_model_ref(model)[0] == OFFLINE:
        _say(
            False,
            "model",
            "the offline model (a script, not an LLM); configure one with --model and its "
            "API key, e.g. --model deepseek:deepseek-chat with DEEPSEEK_API_KEY",
        )
        return False
    request = ModelRequest(
        model=model,
        messages=(UserRoleMessage(content=(TextBlock("Reply with the single word: ok"),)),),
        max_tokens=16,
    )
    started = time.perf_counter()
    answer: list[str] = []
    finish: Finish | None = None
    async for chunk in llm.stream(request, CancelSignal()):
        if isinstance(chunk, TextDelta):
            answer.append(chunk.text)
        elif isinstance(chunk, Finish):
            finish = chunk
    took = (time.perf_counter() - started) * 1000
    if finish is None or finish.reason == "error":
        from tether.front.outcomes import model_failure

        error = (finish.error if finish is not None else None) or "no answer"
        code = finish.error_code if finish is not None else None
        _say(False, "model", f"{model}: {model_failure(error, code)}")
        return False
    said = "".join(answer).strip()[:40]
    _say(True, "model", f"{model} answered in {took:.0f} ms ({said!r})")
    return True

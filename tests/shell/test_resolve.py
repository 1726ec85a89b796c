"""resolve(): every default filled, limits capped, bad requests refused at the boundary."""

from pathlib import Path

import msgspec
import pytest

from tether.runtime import PluginConfigError, Runtime
from tether.shell import (
    BashTask,
    LocalShell,
    ShellExecRequest,
    ShellExecSpec,
    ShellRequestError,
    ShellResult,
)
from tether.shell import local as shell_plugin


def test_resolve_fills_every_default(shell: LocalShell, tmp_path: Path) -> None:
    resolved = shell.resolve(ShellExecRequest("echo hi"))
    assert resolved == ShellExecSpec(
        command="echo hi",
        cwd=str(tmp_path),
        env={},
        timeout_ms=120_000,
        max_output_bytes=1 << 20,
        owner=None,
    )


def test_resolve_keeps_what_the_request_says(shell: LocalShell, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    request = ShellExecRequest(
        "ls",
        cwd="sub",
        env={"A": "1"},
        timeout_ms=5_000,
        owner="",
        max_output_bytes=100,
    )
    resolved = shell.resolve(request)
    assert resolved.cwd == str(tmp_path / "sub")
    assert dict(resolved.env) == {"A": "1"}
    assert (resolved.timeout_ms, resolved.max_output_bytes) == (5_000, 100)
    assert resolved.owner == ""


def test_resolve_caps_timeout_and_output_at_the_configured_maximum(shell: LocalShell) -> None:
    resolved = shell.resolve(ShellExecRequest("true", timeout_ms=10**9, max_output_bytes=10**12))
    assert resolved.timeout_ms == 600_000
    assert resolved.max_output_bytes == 64 << 20


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"command": ""}, "empty"),
        ({"command": "   "}, "empty"),
        ({"command": "echo \0"}, "NUL"),
        ({"command": "true", "timeout_ms": 0}, "timeout_ms must be positive"),
        ({"command": "true", "timeout_ms": -5}, "timeout_ms must be positive"),
        ({"command": "true", "max_output_bytes": 0}, "max_output_bytes must be positive"),
        ({"command": "true", "cwd": "/no/such/dir"}, "does not exist"),
        ({"command": "true", "cwd": "/etc/hostname"}, "is not a directory"),
        ({"command": "true", "cwd": ""}, "cwd is empty"),
        ({"command": "true", "env": {"A=B": "1"}}, "invalid environment variable name"),
    ],
)
def test_resolve_refuses_bad_requests_with_a_clear_error(
    shell: LocalShell, request_fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ShellRequestError, match=message):
        shell.resolve(ShellExecRequest(**request_fields))  # type: ignore[arg-type]


def test_spec_owner_is_required_and_has_no_default() -> None:
    owner = {f.name: f for f in msgspec.structs.fields(ShellExecSpec)}["owner"]
    assert owner.required
    with pytest.raises(TypeError, match="owner"):
        ShellExecSpec(command="true", cwd="/", env={}, timeout_ms=1, max_output_bytes=1)  # type: ignore[call-arg]


def test_the_public_task_has_no_owner_field() -> None:
    assert not hasattr(BashTask, "owner")


def test_request_and_spec_copy_the_environment() -> None:
    env = {"A": "1"}
    request = ShellExecRequest("true", env=env)
    env["A"] = "changed"
    assert request.env == {"A": "1"}
    with pytest.raises(TypeError):
        request.env["A"] = "2"  # type: ignore[index]


def test_a_result_is_never_both_timed_out_and_aborted() -> None:
    with pytest.raises(ValueError, match="never both"):
        ShellResult(stdout="", stderr="", exit_code=None, signal=None, timed_out=True, aborted=True)


@pytest.mark.parametrize(
    "config",
    [
        {"default_timeout_ms": 10, "max_timeout_ms": 5},
        {"default_output_bytes": 10, "max_output_bytes": 5},
        {"cwd": "relative/dir"},
        {"kill_grace_ms": -1},
    ],
)
async def test_bad_config_is_refused_when_mounting(
    runtime: Runtime, config: dict[str, object]
) -> None:
    with pytest.raises(PluginConfigError):
        runtime.ctx.plugin(shell_plugin, config)

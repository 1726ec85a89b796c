"""The API keys ``tether auth login`` stores: one private file, read only when needed.

The file is ``credentials.json`` in the data directory (``$TETHER_HOME``,
else the XDG data home; see :func:`tether.location.data_dir`):
``{"keys": {"deepseek": "sk-…"}}``, one key per provider name. It is mode
0600 in a directory tether creates 0700, and every change writes a new file
beside it and renames it into place, so a reader sees the old file or the
new one, never half of either.

A key read from here lives in tether's memory only: it is never put into an
environment, so no process tether starts can read it there (see
:mod:`tether.fence`). The environment wins: the file is read only when none
of a provider's key variables is set (:func:`tether.provider_keys.provider_key`).

A file tether cannot read as its own (not JSON, not that shape) raises
:class:`CredentialsError` with one line naming it; nothing here overwrites
it — the person fixes or removes it.

This module imports only the standard library: it is read at start-up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FILE_NAME", "CredentialsError", "credentials_path", "read_keys", "write_keys"]

FILE_NAME = "credentials.json"


class CredentialsError(Exception):
    """The credentials file exists but is not one tether can use (the message says why)."""


def credentials_path() -> Path:
    """Where the stored keys live (the file may not exist)."""
    from tether.location import data_dir

    return data_dir() / FILE_NAME


def read_keys(path: Path | None = None) -> dict[str, str]:
    """The stored keys by provider name; empty when there is no file.

    Raises:
        CredentialsError: the file cannot be read or is not a credentials file.
    """
    path = path or credentials_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"cannot read the credentials file {path}: {_reason(exc)}") from None
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, dict) or not all(
        isinstance(name, str) and isinstance(key, str) for name, key in keys.items()
    ):
        raise CredentialsError(
            f"the credentials file {path} is damaged (not the JSON tether writes); "
            "fix or delete it, then sign in again with: tether auth login"
        )
    return dict(keys)


def write_keys(keys: dict[str, str], path: Path | None = None) -> Path:
    """Replace the stored keys with ``keys`` atomically; returns the file's path.

    The directory is created 0700 if missing; the file is written 0600 under
    a temporary name, flushed to disk, and renamed over the old one.

    Raises:
        OSError: the directory or the file cannot be written.
    """
    from tether.location import private_dir

    path = path or credentials_path()
    private_dir(path.parent)
    payload = json.dumps({"keys": dict(sorted(keys.items()))}, indent=2) + "\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            # The mode of a file left behind by an earlier failure is not trusted.
            os.fchmod(handle.fileno(), 0o600)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def forget_key(provider: str, path: Path | None = None) -> bool:
    """Remove the stored key of ``provider`` (the file goes with its last key);
    whether there was one.

    Raises:
        CredentialsError: the file cannot be read or is not a credentials file.
        OSError: the file cannot be rewritten or removed.
    """
    path = path or credentials_path()
    keys = read_keys(path)
    if provider not in keys:
        return False
    del keys[provider]
    if keys:
        write_keys(keys, path)
    else:
        path.unlink(missing_ok=True)
    return True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return "not UTF-8 text"

"""``tether auth login|logout|status``: the API keys tether stores for itself.

``login [PROVIDER]`` asks for the provider's key on the terminal without
echoing it, checks it can be sent (the check ``authenticate`` and the model
settings make), and stores it in the credentials file
(:mod:`tether.credentials`); ``logout [PROVIDER]`` removes it; ``status``
says, for each provider, where its key would come from — never the key.
PROVIDER defaults to the provider of the model tether would use
(:func:`tether.provider_keys.default_provider`).

``tether acp``'s ``terminal`` sign-in runs ``tether auth login PROVIDER`` in
a terminal the editor opens. Without a terminal on stdin, ``login`` refuses
(one line, status 1) rather than read a key that would be echoed or piped.
A damaged credentials file is reported (one line, status 1) and left as it is.
"""

from __future__ import annotations

import argparse
import sys

from tether.credentials import (
    CredentialsError,
    credentials_path,
    forget_key,
    read_keys,
    write_keys,
)
from tether.fence import environ
from tether.provider_keys import KEYS, STORED, default_provider, find_key, provider_key

EXIT_OK = 0
EXIT_FAILED = 1


def auth(args: argparse.Namespace) -> int:
    """Run ``tether auth ACTION``; returns the exit status."""
    try:
        if args.auth_command == "status":
            return _status()
        provider = _provider(args.provider)
        if provider is None:
            return EXIT_FAILED
        if args.auth_command == "login":
            return _login(provider)
        return _logout(provider)
    except CredentialsError as exc:
        return _fail(str(exc))
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _fail(f"the credentials file could not be written: {exc.strerror or exc}{where}")


def _provider(given: str | None) -> str | None:
    provider = (given or default_provider(None, environ())).strip().lower()
    if provider not in KEYS:
        _fail(f"no API key to store for provider {provider!r}; known: {', '.join(KEYS)}")
        return None
    return provider


def _login(provider: str) -> int:
    import getpass

    key_info = KEYS[provider]
    if not sys.stdin.isatty():
        return _fail(
            f"auth login reads the key on a terminal, and stdin is not one; "
            f"run it in a terminal, or set {key_info.variables[0]}"
        )
    keys = read_keys()  # A damaged file stops the login here, before anything is asked.
    print(f"Get a {key_info.label} API key at {key_info.link}", file=sys.stderr)
    try:
        key = getpass.getpass(f"{key_info.label} API key (not shown): ").strip()
    except EOFError:
        key = ""
    if not key:
        return _fail("no key entered; nothing stored")
    from tether.llm.adapters.providers import check_key

    problem = check_key(key, "the terminal")
    if problem is not None:
        return _fail(f"{problem}; nothing stored")
    path = write_keys({**keys, provider: key})
    print(f"Stored the {key_info.label} API key in {path} (readable by you only).")
    shadowing = find_key(key_info.key_variables, environ())
    if shadowing is not None:
        print(f"note: {shadowing[0]} is set, and tether uses it instead while it is.")
    return EXIT_OK


def _logout(provider: str) -> int:
    label = KEYS[provider].label
    if not forget_key(provider):
        print(f"No {label} API key is stored.")
        return EXIT_OK
    print(f"Removed the stored {label} API key.")
    return EXIT_OK


def _status() -> int:
    path = credentials_path()
    read_keys(path)  # A damaged file is reported before anything is printed.
    env = environ()
    print(f"credentials  {path} ({'present' if path.exists() else 'absent'})")
    for provider, key_info in KEYS.items():
        found = provider_key(provider, key_info.key_variables, env)
        if found is not None:
            where = (
                "stored (tether auth login)" if found[0] == STORED else f"{found[0]} (environment)"
            )
        else:
            where = f"none: set {key_info.variables[0]} or run tether auth login {provider}"
        print(f"{provider:<12} {where}")
    return EXIT_OK


def _fail(message: str) -> int:
    print(f"tether: {message}", file=sys.stderr)
    return EXIT_FAILED

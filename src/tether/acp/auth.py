"""ACP authentication: how an editor gets tether the key its model needs.

tether signs in to a model provider with an API key: from its environment,
else the one ``tether auth login`` stored (:mod:`tether.provider_keys`,
:mod:`tether.credentials`). For the provider the model choice needs — the
default provider's when no model is configured — ``initialize`` advertises:

- ACP's ``env_var`` method: the provider's key variable, a label and where to
  get a key, so an editor can ask the person for it and start tether again
  with it set;
- when the client says it runs them (``clientCapabilities.auth.terminal``),
  a ``terminal`` method: the editor runs tether's own command with the args
  ``auth login PROVIDER`` in a terminal, where the person types the key,
  which tether stores.

The methods are advertised whether or not the key is there, so a process
started with the key offers the same method ids to ``authenticate``.

While the model's key is missing, tether does not boot: every request that
needs it (``session/new``, ``session/load``, …) answers ``-32000``
(:data:`AUTH_REQUIRED`, the protocol's "authentication required") saying
what to do. ``authenticate`` looks the key up again — the environment, then
the credentials file, read anew — and succeeds once it is there and well
formed; from then on sessions can start, and the model they use has that
key (tether boots only then). Else it answers ``-32000`` saying why; a
method tether did not advertise is invalid params. The server then has the
running tether use the key (:meth:`tether.acp.server.BridgeSource.signed_in`):
a tether on the offline model for want of any model or key creates new
sessions on the model the key makes usable, and a key signed in again
replaces the one requests used. A key the provider rejects is only found
out by a request: the prompt then fails with the provider's message.

``logout`` (advertised as ``agentCapabilities.auth.logout`` with the sign-in
methods) removes the provider's stored key, as ``tether auth logout`` does,
and from then on every request that needs the model answers ``-32000``
until ``authenticate`` succeeds again.

This module imports only what the handshake already has: it runs before the
``initialize`` answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.credentials import CredentialsError, forget_key
from tether.provider_keys import KEYS, choose_model, provider_key, provider_of

__all__ = ["AUTH_REQUIRED", "AuthError", "ModelAuth", "model_auth", "terminal_auth_supported"]

AUTH_REQUIRED = -32000
"""The JSON-RPC error code ACP gives "authentication required"."""

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603


class AuthError(Exception):
    """A refused ``authenticate`` or a request that needs a key; ``code`` is its JSON-RPC code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ModelAuth:
    """What ``initialize`` advertises, and whether sessions can start (see the module docs)."""

    __slots__ = ("_env", "_env_method", "_offered", "_provider", "_terminal_method", "missing")

    def __init__(
        self,
        provider: str | None = None,
        missing: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._provider = provider
        self._env: Mapping[str, str] = env or {}
        self.missing = missing
        """Why no session can start (the model's key is not there), or ``None``."""
        self._env_method: dict[str, object] | None = None
        self._terminal_method: dict[str, object] | None = None
        if provider is not None:
            self._env_method = _env_var_method(provider)
            self._terminal_method = _terminal_method(provider)
        self._offered: set[str] = set()

    def advertise(self, client_capabilities: object) -> tuple[dict[str, object], ...]:
        """The ``authMethods`` of the ``initialize`` answer to a client with
        ``client_capabilities`` (wire JSON or its wire type); ``authenticate``
        accepts the ids of the methods advertised so far."""
        methods = [self._env_method]
        if terminal_auth_supported(client_capabilities):
            methods.append(self._terminal_method)
        advertised = tuple(method for method in methods if method is not None)
        self._offered.update(str(method["id"]) for method in advertised)
        return advertised

    def authenticate(self, method_id: object) -> None:
        """``authenticate``: return once the key ``method_id`` stands for is there and
        well formed (looked up anew); sessions can start from then on.

        Raises:
            AuthError: ``-32602`` for a method tether did not advertise; ``-32000``
                when the key is not there or cannot be sent (the message says which).
        """
        if not isinstance(method_id, str) or method_id not in self._offered:
            known = ", ".join(repr(m) for m in sorted(self._offered)) or "none"
            raise AuthError(
                INVALID_PARAMS,
                f"Invalid params: unknown authentication method {method_id!r}; "
                f"tether offers {known}",
            )
        assert self._provider is not None
        terminal = self._terminal_method is not None and method_id == self._terminal_method["id"]
        try:
            found = provider_key(self._provider, KEYS[self._provider].key_variables, self._env)
        except CredentialsError as exc:
            raise AuthError(AUTH_REQUIRED, f"Authentication failed: {exc}") from None
        if found is None:
            how = _not_signed_in(self._provider) if terminal else _unset(self._provider)
            raise AuthError(AUTH_REQUIRED, f"Authentication required: {how}")
        # Imported only here: the LLM layer is heavy, and the handshake does not need it.
        from tether.llm.adapters.providers import check_key

        problem = check_key(found[1], found[0])
        if problem is not None:
            raise AuthError(AUTH_REQUIRED, f"Authentication failed: {problem}")
        self.missing = None

    @property
    def can_logout(self) -> bool:
        """Whether there is a sign-in to end: the model's provider needs a key."""
        return self._provider is not None

    def logout(self) -> None:
        """``logout``: remove the provider's stored key (as ``tether auth logout``
        does); every request that needs the model (a new session, a prompt, …) then
        answers ``-32000`` until ``authenticate`` succeeds again, which finds a key
        still set in the environment or one stored by a new sign-in.

        Raises:
            AuthError: ``-32601`` when the model needs no key (logout is not
                advertised); ``-32603`` when the stored key cannot be removed.
        """
        if self._provider is None:
            raise AuthError(
                METHOD_NOT_FOUND, "Method not found: logout (this model needs no sign-in)"
            )
        try:
            forget_key(self._provider)
        except (CredentialsError, OSError) as exc:
            raise AuthError(INTERNAL_ERROR, f"logout failed: {exc}") from None
        self.missing = f"signed out: {_signed_out(self._provider)}"

    def check_ready(self) -> None:
        """Return if sessions can start.

        Raises:
            AuthError: ``-32000``: the model's key is not there (the message says what to do).
        """
        if self.missing is not None:
            raise AuthError(AUTH_REQUIRED, f"Authentication required: {self.missing}")


def model_auth(model: str | None, env: Mapping[str, str]) -> ModelAuth:
    """The authentication of a ``tether acp`` started with ``--model model`` in ``env``.

    A provider that needs no key (``openai-compatible``, the offline model
    chosen by name, one a plugin brings) gets no method. A damaged
    credentials file counts as a missing key, its error the reason.
    """
    try:
        ref, _source = choose_model(model, env)
    except CredentialsError as exc:
        # Read only when no model is named: the default model's provider is the one.
        return ModelAuth(provider_of(None), str(exc), env)
    provider = provider_of(ref)
    if provider not in KEYS:
        return ModelAuth()
    try:
        if ref is None or provider_key(provider, KEYS[provider].key_variables, env) is not None:
            return ModelAuth(provider, None, env)
    except CredentialsError as exc:
        return ModelAuth(provider, str(exc), env)
    return ModelAuth(provider, f"model {ref!r} needs an API key: {_unset(provider)}", env)


def terminal_auth_supported(client_capabilities: object) -> bool:
    """Whether a client runs ``terminal`` methods: its ``clientCapabilities.auth.terminal``."""
    import msgspec

    if isinstance(client_capabilities, msgspec.Struct):
        client_capabilities = msgspec.to_builtins(client_capabilities)
    auth = client_capabilities.get("auth") if isinstance(client_capabilities, dict) else None
    return isinstance(auth, dict) and auth.get("terminal") is True


def _env_var_method(provider: str) -> dict[str, object]:
    key = KEYS[provider]
    return {
        "type": "env_var",
        "id": f"{provider}-api-key",
        "name": f"{key.label} API key",
        "description": f"tether reads the {key.label} API key from {key.variables[0]}",
        "vars": [{"name": name, "label": f"{key.label} API key"} for name in key.variables],
        "link": key.link,
    }


def _terminal_method(provider: str) -> dict[str, object]:
    key = KEYS[provider]
    return {
        "type": "terminal",
        "id": f"{provider}-login",
        "name": f"Sign in to {key.label}",
        "description": f"Type a {key.label} API key in a terminal; tether stores it for you",
        "args": ["auth", "login", provider],
    }


def _unset(provider: str) -> str:
    variables = KEYS[provider].key_variables
    return (
        f"{' or '.join(variables)} is not set in tether's environment and no key is stored; "
        "set it (the editor's sign-in for this method does) and start tether again"
    )


def _signed_out(provider: str) -> str:
    return (
        f"authenticate again to start sessions (a {KEYS[provider].label} key set in "
        f"the environment is still used; tether auth login {provider} stores one)"
    )


def _not_signed_in(provider: str) -> str:
    return (
        f"no {KEYS[provider].label} API key is stored yet; complete the sign-in in the "
        f"terminal (tether auth login {provider}), then authenticate again"
    )

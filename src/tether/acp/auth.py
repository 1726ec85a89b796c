"""ACP authentication: what an editor is told to set when tether's model has no key.

tether signs in to a model provider with an API key from its environment
(:mod:`tether.provider_keys`). For the provider the model choice needs — the
default provider's when no model is configured — ``initialize`` advertises
ACP's ``env_var`` method: the provider's key variable, a label and where to
get a key, so an editor can ask the person for it and start tether again
with it set. The method is advertised whether or not the key is set, so the
process started with the key offers the same method id to ``authenticate``.

While the model's key is missing, tether does not boot: every request that
needs it (``session/new``, ``session/load``, …) answers ``-32000``
(:data:`AUTH_REQUIRED`, the protocol's "authentication required") saying
which variable to set. ``authenticate`` succeeds once the method's key is set
and well formed; else it answers ``-32000`` saying why, and an unknown
method id is invalid params. A key the provider rejects is only found out by
a request: the prompt then fails with the provider's message.

This module imports only what the handshake already has: it runs before the
``initialize`` answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.provider_keys import DEFAULT_MODEL, GENERIC_KEY_ENV, KEYS, choose_model, find_key

__all__ = ["AUTH_REQUIRED", "AuthError", "ModelAuth", "model_auth"]

AUTH_REQUIRED = -32000
"""The JSON-RPC error code ACP gives "authentication required"."""

INVALID_PARAMS = -32602


class AuthError(Exception):
    """A refused ``authenticate`` or a request that needs a key; ``code`` is its JSON-RPC code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ModelAuth:
    """What ``initialize`` advertises, and whether sessions can start (see the module docs)."""

    __slots__ = ("_env", "_variables", "methods", "missing")

    def __init__(
        self,
        methods: tuple[dict[str, object], ...] = (),
        variables: Mapping[str, tuple[str, ...]] | None = None,
        missing: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.methods = methods
        """The ``authMethods`` of the ``initialize`` answer (wire JSON)."""
        self.missing = missing
        """Why no session can start (the model's key is not set), or ``None``."""
        self._variables = dict(variables or {})
        self._env: Mapping[str, str] = env or {}

    def authenticate(self, method_id: object) -> None:
        """``authenticate``: return if the key ``method_id`` stands for is set and well formed.

        Raises:
            AuthError: ``-32602`` for a method tether did not advertise; ``-32000``
                when its key is not set or cannot be sent (the message says which).
        """
        variables = self._variables.get(method_id) if isinstance(method_id, str) else None
        if variables is None:
            known = ", ".join(repr(m) for m in self._variables) or "none"
            raise AuthError(
                INVALID_PARAMS,
                f"Invalid params: unknown authentication method {method_id!r}; "
                f"tether offers {known}",
            )
        found = find_key(variables, self._env)
        if found is None:
            raise AuthError(AUTH_REQUIRED, f"Authentication required: {_unset(variables)}")
        # Imported only here: the LLM layer is heavy, and the handshake does not need it.
        from tether.llm.adapters.providers import check_key

        problem = check_key(found[1], found[0])
        if problem is not None:
            raise AuthError(AUTH_REQUIRED, f"Authentication failed: {problem}")

    def check_ready(self) -> None:
        """Return if sessions can start.

        Raises:
            AuthError: ``-32000``: the model's key is not set (the message says which).
        """
        if self.missing is not None:
            raise AuthError(AUTH_REQUIRED, f"Authentication required: {self.missing}")


def model_auth(model: str | None, env: Mapping[str, str]) -> ModelAuth:
    """The authentication of a ``tether acp`` started with ``--model model`` in ``env``.

    A provider that needs no key (``openai-compatible``, the offline model
    chosen by name, one a plugin brings) gets no method.
    """
    ref, _source = choose_model(model, env)
    provider = (ref or DEFAULT_MODEL).partition(":")[0]
    key = KEYS.get(provider)
    if key is None:
        return ModelAuth()
    method_id = f"{provider}-api-key"
    variables = (*key.variables, GENERIC_KEY_ENV)
    method: dict[str, object] = {
        "type": "env_var",
        "id": method_id,
        "name": f"{key.label} API key",
        "description": f"tether reads the {key.label} API key from {key.variables[0]}",
        "vars": [{"name": name, "label": f"{key.label} API key"} for name in key.variables],
        "link": key.link,
    }
    missing = None
    if ref is not None and find_key(variables, env) is None:
        missing = f"model {ref!r} needs an API key: {_unset(variables)}"
    return ModelAuth((method,), {method_id: variables}, missing, env)


def _unset(variables: tuple[str, ...]) -> str:
    return (
        f"{' or '.join(variables)} is not set in tether's environment; "
        "set it (the editor's sign-in for this method does) and start tether again"
    )

"""The HTTP side every adapter shares: one pooled client, and a POST that streams events.

``httpx`` and ``httpx_sse`` are imported on first use, not when this module
is, so a composition that mounts the adapter plugins without calling a model
never pays for them.

:meth:`HttpClient.events` is where transport failures become
:class:`~tether.llm.adapters.errors.ProviderError`: an error status, a
timeout, a refused or dropped connection, a response that is not an event
stream. A request that fails on a reused pooled connection before any byte
of its answer came (the server had closed that connection after its last
answer, as llama.cpp's server and vLLM do although they advertise
keep-alive) is sent again at once on a new connection, without a word: it
never reached the server.

Cancellation is the caller's task being cancelled while it awaits the next
event (that is how :meth:`tether.llm.service.LlmService.stream` interrupts
an adapter): the response, and with it the connection, is closed before the
cancel propagates, so a cancelled request never holds a pooled connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING

import msgspec

from tether.llm.adapters.errors import (
    ProviderError,
    classify_status,
    error_message,
    parse_retry_after,
)
from tether.masking import mask_credentials

if TYPE_CHECKING:
    import httpx
    from httpx_sse import ServerSentEvent

__all__ = ["HttpClient", "HttpOptions", "dumps"]

log = logging.getLogger(__name__)

_ERROR_BODY_BYTES = 64 * 1024


def dumps(value: object) -> str:
    """``value`` as compact JSON; read-only mappings (as a log holds) are written as objects."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain)


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class HttpOptions(msgspec.Struct, frozen=True):
    """Timeouts (seconds) and pool size of an adapter's client.

    ``first_byte_timeout`` bounds the wait for the first event of an answer: a
    local server processing a long prompt sends nothing until it has
    processed it, which takes minutes on a CPU. ``idle_timeout`` then bounds
    each wait for progress of the answer (the next stream chunk; keep-alive
    bytes do not count). The adapter enforces both
    (:class:`~tether.llm.adapters.streaming.HttpAdapter`). ``read_timeout``
    bounds each wait for bytes at the transport, but never cuts the wait for
    the first byte short of ``first_byte_timeout``.
    """

    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    write_timeout: float = 30.0
    max_connections: int = 20
    idle_timeout: float = 120.0
    first_byte_timeout: float = 600.0


class HttpClient:
    """The pooled ``httpx.AsyncClient`` of one adapter plugin, created on first use.

    There are two, one per scheme, each created by the first request that
    needs it. An ``https`` client verifies certificates against the CA
    bundle, which takes tens of milliseconds to load. An ``http`` client
    (a local server: vLLM, Ollama, llama.cpp) never negotiates TLS, so it is
    created without loading that bundle; it is given ``http://`` URLs only,
    and no client follows redirects. :meth:`aclose` closes both (and every
    pooled connection).
    """

    __slots__ = ("_clients", "_options", "_urls")

    def __init__(self, options: HttpOptions) -> None:
        self._options = options
        self._clients: dict[bool, httpx.AsyncClient] = {}
        # Parsed once: httpx parses a URL given as a string on every request.
        self._urls: dict[str, httpx.URL] = {}

    @property
    def options(self) -> HttpOptions:
        return self._options

    def _get(self, url: str) -> httpx.AsyncClient:
        secure = not url.startswith("http://")
        client = self._clients.get(secure)
        if client is None:
            import httpx

            options = self._options
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    connect=options.connect_timeout,
                    # The adapter bounds the wait for the first event (which may
                    # be long) and for progress after it; see HttpOptions.
                    read=max(options.read_timeout, options.first_byte_timeout),
                    write=options.write_timeout,
                    pool=options.connect_timeout,
                ),
                limits=httpx.Limits(
                    max_connections=options.max_connections,
                    max_keepalive_connections=options.max_connections,
                ),
                # Plain HTTP has no certificate to verify: skip loading the CA bundle.
                verify=secure,
                follow_redirects=False,
            )
            self._clients[secure] = client
        return client

    async def aclose(self) -> None:
        """Close the clients and their connections; the next request opens new ones."""
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.aclose()

    async def events(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        content: bytes,
        provider: str,
    ) -> AsyncGenerator[ServerSentEvent, None]:
        """POST ``content`` (a JSON body) to ``url``; yield the server-sent events of the answer.

        Raises:
            ProviderError: the provider answered with an error status (its
                message, the code from :func:`classify_status`, its
                ``Retry-After``), the answer is not an event stream, or the
                transport failed (``timeout`` or ``transport``), before or
                during the stream. The message may quote the provider; the
                adapter scrubs its key from it (see :func:`.errors.redact`).
        """
        import httpx

        from tether.llm.adapters.sse import parse_events

        client = self._get(url)
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = self._urls[url] = httpx.URL(url)
        request_headers = {
            **headers,
            "accept": "text/event-stream",
            "cache-control": "no-store",
            "content-type": "application/json",
        }
        try:
            response = await _send(client, parsed, request_headers, content)
            try:
                if response.status_code >= 400:
                    raise await _status_error(response, provider)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    raise await _not_a_stream(response, provider)
                async for event in parse_events(response.aiter_text()):
                    yield event
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            text = mask_credentials(f"{provider}: {self._timed_out(exc, url)}")
            raise ProviderError("timeout", text) from None
        except httpx.ConnectError as exc:
            # No server took the connection: refused, unknown host, no route.
            text = mask_credentials(f"{provider}: cannot connect to {url}: {_detail(exc)}")
            raise ProviderError("unreachable", text) from None
        except (httpx.TransportError, httpx.StreamError) as exc:
            text = mask_credentials(f"{provider}: connection to {url} failed: {_detail(exc)}")
            raise ProviderError("transport", text) from None

    def _timed_out(self, exc: httpx.TimeoutException, url: str) -> str:
        """What timed out, in one line that names the setting to change."""
        import httpx

        options = self._options
        if isinstance(exc, httpx.ConnectTimeout):
            seconds = options.connect_timeout
            return f"could not connect to {url} within {seconds:g} s (connect_timeout)"
        if isinstance(exc, httpx.ReadTimeout):
            seconds = max(options.read_timeout, options.first_byte_timeout)
            return f"{url} sent nothing for {seconds:g} s (read_timeout)"
        return f"timed out talking to {url}: {_detail(exc)}"


async def _send(
    client: httpx.AsyncClient, url: httpx.URL, headers: dict[str, str], content: bytes
) -> httpx.Response:
    """POST ``content``; the response, its body not read yet.

    A request that fails before any byte of its answer on a connection taken
    from the pool (not opened for it) is sent once more, at once: the server
    had closed that connection, and never saw the request.

    Raises:
        httpx.HTTPError: the request failed (on a new connection, or twice).
    """
    import httpx

    opened = False

    async def trace(name: str, info: Mapping[str, object]) -> None:
        nonlocal opened
        if name.startswith("connection.connect_tcp."):
            opened = True

    request = client.build_request(
        "POST", url, headers=headers, content=content, extensions={"trace": trace}
    )
    try:
        return await client.send(request, stream=True)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        if opened:
            raise
        log.debug("a pooled connection to %s was closed (%s); sending again", url, _detail(exc))
    request = client.build_request("POST", url, headers=headers, content=content)
    return await client.send(request, stream=True)


async def _status_error(response: httpx.Response, provider: str) -> ProviderError:
    body = await _read_some(response)
    message, error_type = error_message(body)
    code = classify_status(response.status_code, message, error_type)
    text = f"{provider}: HTTP {response.status_code} ({code}): {message}"
    return ProviderError(code, text, parse_retry_after(response.headers))


async def _not_a_stream(response: httpx.Response, provider: str) -> ProviderError:
    content_type = response.headers.get("content-type", "")
    body = await _read_some(response)
    message, _ = error_message(body)
    text = (
        f"{provider}: expected a server-sent event stream, got content type "
        f"{content_type or 'none'!r}: {message}"
    )
    return ProviderError("endpoint", text)


def _detail(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


async def _read_some(response: httpx.Response) -> bytes:
    """Up to 64 KiB of the body: enough for any error message, bounded for a hostile one."""
    import httpx

    parts: list[bytes] = []
    size = 0
    try:
        async for part in response.aiter_bytes():
            parts.append(part)
            size += len(part)
            if size >= _ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        # The status already says what failed; a body cut short only loses detail.
        pass
    return b"".join(parts)[:_ERROR_BODY_BYTES]

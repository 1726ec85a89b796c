"""The model adapter over HTTP: one request, one streamed answer, every failure a finish.

:class:`HttpAdapter` is what both adapters are; a subclass says where the
request goes (:attr:`~HttpAdapter.path`), what it carries
(:meth:`~HttpAdapter.body`, :meth:`~HttpAdapter.headers`; it may encode the
body faster with :meth:`~HttpAdapter.encode`) and how to read the
answer (:meth:`~HttpAdapter.decoder`).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, ClassVar

from tether.llm.adapters.decoding import Decoder
from tether.llm.adapters.endpoint import Endpoint
from tether.llm.adapters.errors import ProviderError, redact
from tether.llm.adapters.http import HttpClient, HttpOptions, dumps
from tether.llm.chunks import Finish, StreamChunk
from tether.llm.request import ModelRequest
from tether.masking import mask_credentials
from tether.runtime.signal import CancelSignal

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

__all__ = ["DRAIN_SECONDS", "HttpAdapter", "failure"]

DRAIN_SECONDS = 2.0
"""How long the rest of a response may take once the answer is complete."""


class HttpAdapter(ABC):
    """A :class:`~tether.llm.service.ModelAdapter` for one provider's HTTP endpoint.

    :meth:`stream` never raises for a provider failure: a missing key or base
    URL, an error status, a timeout, a dropped connection, an error event or
    a stream cut short ends it with ``Finish("error")`` carrying a normalized
    code (:mod:`~tether.llm.adapters.errors`), the provider's message with the
    key scrubbed, and the ``Retry-After`` hint. The key appears in no
    ``repr``.
    """

    __slots__ = ("_endpoint", "_http")

    path: ClassVar[str]
    """Where requests go, below the base URL (``"/chat/completions"``)."""

    def __init__(self, endpoint: Endpoint, http: HttpClient) -> None:
        self._endpoint = endpoint
        self._http = http

    @property
    def name(self) -> str:
        return self._endpoint.provider

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    def __repr__(self) -> str:
        url = self._endpoint.preset.base_url
        base_url = None if url is None else mask_credentials(url)
        return f"{type(self).__name__}(provider={self.name!r}, base_url={base_url!r})"

    @abstractmethod
    def body(self, request: ModelRequest, model: str) -> dict[str, object]:
        """The JSON body that asks ``model`` for the answer to ``request``."""

    def encode(self, request: ModelRequest, model: str) -> bytes:
        """:meth:`body` as the bytes sent (compact JSON).

        An adapter may encode faster; its bytes must decode to :meth:`body`.
        """
        return dumps(self.body(request, model)).encode()

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """The request headers, authentication included."""

    @abstractmethod
    def decoder(self, request: ModelRequest) -> Decoder:
        """A fresh decoder for the answer to ``request``."""

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncGenerator[StreamChunk, None]:
        """Stream the answer to ``request``; see the class docstring for failures.

        The first event must come within the client's ``first_byte_timeout``
        of the request (a local server sends nothing while it processes the
        prompt); after it, each event must come within ``read_timeout`` of the
        one before it, and each chunk within ``idle_timeout`` of the one before
        it (of the first event, for the first): an answer that stalls, even on
        a connection that keeps sending keep-alive bytes, ends with a
        ``timeout`` error naming the setting. A cancelled ``signal`` seen
        between events ends the stream with ``Finish("aborted")``; closing the
        generator early (which is how the ``llm`` service interrupts a blocked
        adapter) closes the response and its connection at once.
        """
        endpoint = self._endpoint
        try:
            if endpoint.problem is not None:
                raise endpoint.problem
            content = self.encode(request, endpoint.model(request.model_name))
            decoder = self.decoder(request)
            events = self._http.events(
                endpoint.url(self.path),
                headers=self.headers(),
                content=content,
                provider=endpoint.provider,
            )
            clock = _Clock(self.name, self._http.options)
            async with contextlib.aclosing(events):
                while (event := await _next(events, clock)) is not None:
                    if signal.cancelled:
                        yield Finish("aborted")
                        return
                    chunks = decoder.feed(event)
                    clock.arrived(progress=bool(chunks))
                    for chunk in chunks:
                        yield chunk
                    if decoder.done:
                        await _drain(events)
                        break
            for chunk in decoder.end():
                yield chunk
        except ProviderError as exc:
            yield failure(exc, endpoint)


class _Clock:
    """When the next event of one answer is due, and the error if it is late.

    Before the first event: ``first_byte_timeout`` after the request. After
    it: ``read_timeout`` after the last event, or ``idle_timeout`` after the
    last progress (an event that carried chunks), whichever comes first.
    """

    __slots__ = ("_began", "_event", "_loop", "_options", "_progress", "_provider")

    def __init__(self, provider: str, options: HttpOptions) -> None:
        self._provider = provider
        self._options = options
        self._loop = asyncio.get_running_loop()
        self._began = False
        self._event = self._progress = self._loop.time()

    def arrived(self, *, progress: bool) -> None:
        """An event arrived; ``progress``: it carried chunks (the first always counts)."""
        now = self._loop.time()
        self._event = now
        if progress or not self._began:
            self._progress = now
        self._began = True

    @property
    def due(self) -> float:
        """The loop time by which the next event must arrive."""
        options = self._options
        if not self._began:
            return self._progress + options.first_byte_timeout
        return min(self._event + options.read_timeout, self._progress + options.idle_timeout)

    def late(self) -> ProviderError:
        """The ``timeout`` error of an event that missed :attr:`due`, naming the setting."""
        options, provider = self._options, self._provider
        if not self._began:
            message = (
                f"{provider}: no answer began within {options.first_byte_timeout:g} s "
                "(first_byte_timeout in the adapter's configuration); a local server sends "
                "nothing while it processes a long prompt, and a retry processes the whole "
                "prompt again"
            )
        elif self._event + options.read_timeout < self._progress + options.idle_timeout:
            message = (
                f"{provider}: the answer stalled: the server sent nothing for "
                f"{options.read_timeout:g} s (read_timeout)"
            )
        else:
            message = (
                f"{provider}: the answer stalled: nothing new for {options.idle_timeout:g} s "
                "(idle_timeout in the adapter's configuration)"
            )
        return ProviderError("timeout", message)


async def _next(
    events: AsyncGenerator[ServerSentEvent, None], clock: _Clock
) -> ServerSentEvent | None:
    """The next event (``None`` at the end), if it comes by ``clock.due``.

    Raises:
        ProviderError: it did not (``timeout``, see :meth:`_Clock.late`), or as
            the events raise it.
    """
    try:
        async with asyncio.timeout_at(clock.due) as wait:
            return await anext(events)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        if not wait.expired():
            raise
        raise clock.late() from None


async def _drain(events: AsyncGenerator[object, None]) -> None:
    """Read what follows the end of an answer (the end of the body, normally at once).

    A response read to its end hands its connection back to the pool; one
    closed early closes the connection, and the next request pays for a new
    one (a TLS handshake, with a real provider). A server that keeps the
    stream open past the end gets :data:`DRAIN_SECONDS`; the answer is
    complete either way.
    """
    with contextlib.suppress(ProviderError, TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass


def failure(exc: ProviderError, endpoint: Endpoint) -> Finish:
    """The ``"error"`` finish reporting ``exc``, with ``endpoint``'s key scrubbed."""
    return Finish(
        "error",
        error=redact(exc.message, endpoint.secret),
        error_code=exc.code,
        retry_after=exc.retry_after,
    )

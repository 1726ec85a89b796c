"""Spans and metrics sent over OTLP (HTTP/protobuf) with the OpenTelemetry SDK.

The one module that imports the ``opentelemetry`` packages (the optional
``telemetry`` extra): it is imported only when telemetry is on, so a tether
with telemetry off never loads them.

:class:`OtlpSink` turns :class:`~tether.telemetry.spans.SpanRecord` values,
whose ids and times come from the log, into SDK spans as they are (nothing is
timed or numbered here), and records the metrics of each span it sends:

* ``gen_ai.client.token.usage`` (histogram, ``{token}``; by
  ``gen_ai.token.type`` ``input`` / ``output``) per model call;
* ``gen_ai.client.operation.duration`` (histogram, seconds) per model call
  (the durations of tool calls and turns are their spans');
* ``tether.cost`` (counter, by ``tether.cost.currency``) per priced model call;
* ``tether.tool.errors`` (counter, by ``gen_ai.tool.name``) per failed tool call.

Its methods block (HTTP): call them off the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

if TYPE_CHECKING:
    from tether.telemetry.spans import SpanRecord

log = logging.getLogger(__name__)

SCOPE = InstrumentationScope("tether.telemetry", "1")
_NS = 1_000_000_000
_KINDS = {"chat": SpanKind.CLIENT, "invoke_agent": SpanKind.INTERNAL}
_FOREVER_MS = 24 * 3600 * 1000.0
"""The metric reader's period: metrics are sent by :meth:`OtlpSink.send`, not on a timer."""


class _Resource(Resource):
    """A resource hashed once: the encoder hashes the resource of every span it sends,
    and :class:`Resource` encodes its attributes as JSON for each hash. A resource is
    immutable, so its hash never changes."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


class ExportFailedError(Exception):
    """The OTLP endpoint did not take a batch of spans."""


def signal_url(endpoint: str, signal: str) -> str:
    """The URL of ``signal`` (``traces``, ``metrics``) under an OTLP/HTTP base endpoint
    (``http://host:4318``); an endpoint that already names a signal path keeps its base."""
    base = endpoint.rstrip("/")
    for known in ("/v1/traces", "/v1/metrics", "/v1/logs"):
        if base.endswith(known):
            base = base[: -len(known)]
    return f"{base}/v1/{signal}"


class OtlpSink:
    """An OTLP/HTTP destination for the spans and metrics of sessions."""

    def __init__(
        self,
        endpoint: str,
        headers: Mapping[str, str] | None = None,
        *,
        service_name: str = "tether",
        timeout: float = 10.0,
    ) -> None:
        self._resource = _Resource(Resource.create({"service.name": service_name}))
        # No headers: the SDK reads OTEL_EXPORTER_OTLP_HEADERS.
        extra = None if headers is None else dict(headers)
        self._spans = OTLPSpanExporter(
            endpoint=signal_url(endpoint, "traces"), headers=extra, timeout=timeout
        )
        self._reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(
                endpoint=signal_url(endpoint, "metrics"),
                headers=extra,
                timeout=timeout,
            ),
            export_interval_millis=_FOREVER_MS,
        )
        self._meters = MeterProvider(resource=self._resource, metric_readers=[self._reader])
        meter = self._meters.get_meter("tether.telemetry")
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per model call"
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of operations"
        )
        self._cost = meter.create_counter("tether.cost", description="Spend on model calls")
        self._tool_errors = meter.create_counter(
            "tether.tool.errors", unit="{call}", description="Tool calls that failed"
        )

    def send(self, records: Sequence[SpanRecord]) -> None:
        """Send ``records`` as spans, then their metrics.

        Raises:
            ExportFailedError: the endpoint refused the spans or could not be
                reached (the SDK logs why); no metric was recorded for them.
        """
        if not records:
            return
        result = self._spans.export([self._span(record) for record in records])
        if result is not SpanExportResult.SUCCESS:
            raise ExportFailedError(f"{len(records)} spans not taken by the OTLP endpoint")
        for record in records:
            self._measure(record)
        self._reader.force_flush()

    def close(self) -> None:
        """Send what metrics are left and release the connections."""
        self._meters.shutdown()
        self._spans.shutdown()  # type: ignore[no-untyped-call]

    def _span(self, record: SpanRecord) -> ReadableSpan:
        flags = TraceFlags(TraceFlags.SAMPLED)
        context = SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=flags)
        parent = (
            None
            if record.parent_id is None
            else SpanContext(record.trace_id, record.parent_id, is_remote=False, trace_flags=flags)
        )
        operation = str(record.attributes.get("gen_ai.operation.name", ""))
        status = Status(StatusCode.ERROR, record.error) if record.error is not None else Status()
        return ReadableSpan(
            record.name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=dict(record.attributes),
            events=[
                SdkEvent(e.name, dict(e.attributes), timestamp=_ns(e.time)) for e in record.events
            ],
            kind=_KINDS.get(operation, SpanKind.INTERNAL),
            status=status,
            start_time=_ns(record.start),
            end_time=_ns(record.end),
            instrumentation_scope=SCOPE,
        )

    def _measure(self, record: SpanRecord) -> None:
        attributes = record.attributes
        operation = str(attributes.get("gen_ai.operation.name", ""))
        common = {
            key: attributes[key]
            for key in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model")
            if key in attributes
        }
        if record.error is not None:
            common["error.type"] = str(attributes.get("error.type", record.error))
        if operation == "chat":
            self._duration.record(record.duration, common)
            for kind in ("input", "output"):
                tokens = attributes.get(f"gen_ai.usage.{kind}_tokens")
                if isinstance(tokens, int):
                    self._tokens.record(tokens, {**common, "gen_ai.token.type": kind})
            cost = attributes.get("tether.cost")
            if isinstance(cost, float | int):
                currency = str(attributes.get("tether.cost.currency", "USD"))
                self._cost.add(cost, {**common, "tether.cost.currency": currency})
        elif operation == "execute_tool" and record.error is not None:
            self._tool_errors.add(1, {"gen_ai.tool.name": str(attributes["gen_ai.tool.name"])})


def _ns(seconds: float) -> int:
    return round(seconds * _NS)

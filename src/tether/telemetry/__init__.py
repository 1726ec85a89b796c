"""OpenTelemetry traces and metrics rebuilt from session logs (docs/telemetry.md).

:mod:`~tether.telemetry.spans` folds a session's events into spans following
the GenAI semantic conventions, with ids derived from the session id and the
seqs; :mod:`~tether.telemetry.export` keeps how far each session was sent;
:mod:`~tether.telemetry.otlp` sends spans and metrics over OTLP/HTTP (the only
module that imports the ``opentelemetry`` packages); :mod:`~tether.telemetry.plugin`
is the live exporter; :mod:`~tether.telemetry.propagation` the ``TRACEPARENT``
of the processes a tool call starts.
"""

"""OpenTelemetry spans and structlog loggers, costing close to nothing until an application configures them.

Spans follow the GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` ...; a response's usage as ``usage_attributes`` names it). While no SDK tracer
provider is installed, ``span`` returns a shared no-op object without touching the OpenTelemetry context
machinery at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import logging
import os
import sys
from typing import TextIO

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from loop._parts import Usage
from loop._scope import run_path
from loop.errors import UsageError

__all__ = ["NOOP_SPAN", "configure", "configure_logging", "current_tracer", "enabled", "logger", "span", "start",
           "usage_attributes"]

_NAME = "cognitive-loop"
RUN_PATH = "cognitive_loop.run.path"
# A response's usage under the GenAI semantic conventions' names; the cache counts are within input_tokens, as
# the conventions ask. Cost has no name there, so it gets one of the framework's own.
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
COST = "cognitive_loop.usage.cost"
_NOOP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
# The tracer chosen with ``configure`` (inside a tuple, so that "chose no tracing" is (None,));
# None follows OpenTelemetry's global provider.
_chosen: tuple[trace.Tracer | None] | None = None


class _NoopSpan:
    """Stands in for a span while tracing is off; every method does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NOOP_SPAN = _NoopSpan()


def configure(tracer_provider: trace.TracerProvider | None) -> None:
    """Send the framework's spans to ``tracer_provider`` instead of OpenTelemetry's global provider.

    ``None`` goes back to the global provider. Useful when an application keeps several providers, and in
    tests, which cannot replace the global provider once it is set.
    """
    global _chosen
    if tracer_provider is None:
        _chosen = None
    elif isinstance(tracer_provider, _NOOP_PROVIDERS):
        _chosen = (None,)
    else:
        _chosen = (tracer_provider.get_tracer(_NAME),)


_global: trace.Tracer | None = None  # the global provider's tracer, once a real provider is installed


# While OpenTelemetry has no global provider and its environment variable names none to load,
# ``get_tracer_provider`` returns the proxy; it is asked only when either may be set, because its check of
# the variable goes through ``os.environ`` (a key encoding and a KeyError) on every call. Measured: 0.1 µs
# per lookup with the peeks against 0.8 µs asking OpenTelemetry, and a turn with a tool call looks up three
# times, about 6% of ReAct's whole per-turn overhead (34 µs). Both peeks fall back to asking OpenTelemetry
# if its or Python's internals ever change.
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"
_environ_data: Any = getattr(os.environ, "_data", None)
_environ_key: Any = os.environ.encodekey(_ENV_PROVIDER) if _environ_data is not None else None
_UNKNOWN = object()
_PEEKS = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is not _UNKNOWN and _environ_data is not None  # both there


def current_tracer() -> trace.Tracer | None:
    """The tracer spans go to, or ``None`` while tracing is off. Hot paths look it up once and pass it on."""
    global _global
    if _chosen is not None:
        return _chosen[0]
    if _global is not None:
        return _global
    # OpenTelemetry's global provider is certainly the proxy: nothing installed, nothing to load.
    if _PEEKS and trace._TRACER_PROVIDER is None and _environ_key not in _environ_data:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, _NOOP_PROVIDERS):
        return None
    # OpenTelemetry lets the global provider be set only once, so its tracer can be kept.
    _global = provider.get_tracer(_NAME)
    return _global


def enabled() -> bool:
    """Whether spans are being recorded: an OpenTelemetry SDK tracer provider is installed or configured."""
    return current_tracer() is not None


def start(tracer: trace.Tracer | None, name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A span context manager on ``tracer`` (from ``current_tracer``), or the no-op span when it is ``None``.

    Attribute values of ``None`` are left out, so callers can pass optional settings as they are.
    """
    if tracer is None:
        return NOOP_SPAN
    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    path = run_path()
    if path:
        clean.setdefault(RUN_PATH, path)  # every span says which run made it, as events do
    return _Current(tracer.start_span(name, attributes=clean))


class _Current:
    """Makes ``span`` current for a ``with`` block and ends it after, as ``start_as_current_span`` does (an
    ``Exception`` raised in the block is recorded on the span and sets its status to error), as a class: a
    fifth cheaper than OpenTelemetry's generator-based managers, and spans are made on every turn."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def __enter__(self) -> trace.Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        span = self._span
        try:
            otel_context.detach(self._token)
            # Only errors: BaseExceptions that are not Exceptions (a cancellation, GeneratorExit) are not failures.
            if isinstance(exc, Exception) and span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            span.end()


def span(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A context manager opening a span named ``name`` (current for its body), or the no-op span."""
    return start(current_tracer(), name, attributes)


def usage_attributes(usage: Usage, cost: float | None = None) -> dict[str, Any]:
    """The span attributes of a response's ``usage``: input and output tokens, the prompt-cache counts when
    there are any (``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``), and
    ``cost`` in US dollars (``cognitive_loop.usage.cost``) when it is known. Set them with one
    ``span.set_attributes`` call: the SDK takes a lock per call."""
    found: dict[str, Any] = {INPUT_TOKENS: usage.input_tokens, OUTPUT_TOKENS: usage.output_tokens}
    if usage.cache_read_tokens:
        found[CACHE_READ_TOKENS] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        found[CACHE_WRITE_TOKENS] = usage.cache_write_tokens
    if cost is not None:
        found[COST] = cost
    return found


def logger(name: str) -> Any:
    """A structlog logger named ``name``; configure structlog in the application to route and render it."""
    return structlog.get_logger(name)


def configure_logging(*, level: str = "info", json: bool = False, stream: TextIO | None = None) -> None:
    """Set structlog up for an application: ``level`` and above, key=value (or JSON) lines, on ``stream``
    (standard error by default, so logs never mix with a chat or a protocol on standard output)."""
    number = logging.getLevelName(level.upper()) if isinstance(level, str) else None
    if not isinstance(number, int):
        raise UsageError(f"unknown log level {level!r}; use debug, info, warning or error")
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )

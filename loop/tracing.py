"""OpenTelemetry spans and structlog loggers, costing close to nothing until an application configures them.

Spans follow the GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` ...). While no SDK tracer provider is installed, ``span`` returns a shared no-op
object without touching the OpenTelemetry context machinery at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from opentelemetry import trace

__all__ = ["NOOP_SPAN", "configure", "enabled", "logger", "span"]

_NAME = "cognitive-loop"
_NOOP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
# (provider, tracer) chosen with ``configure``; None follows OpenTelemetry's global provider.
_chosen: tuple[trace.TracerProvider, trace.Tracer] | None = None


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
    _chosen = None if tracer_provider is None else (tracer_provider, tracer_provider.get_tracer(_NAME))


def _tracer() -> trace.Tracer | None:
    if _chosen is not None:
        provider, tracer = _chosen
    else:
        provider = trace.get_tracer_provider()
        tracer = None
    if isinstance(provider, _NOOP_PROVIDERS):
        return None
    return tracer or provider.get_tracer(_NAME)


def enabled() -> bool:
    """Whether spans are being recorded: an OpenTelemetry SDK tracer provider is installed or configured."""
    return _tracer() is not None


def span(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A context manager opening a span named ``name`` (current for its body), or the no-op span.

    Attribute values of ``None`` are left out, so callers can pass optional settings as they are.
    """
    tracer = _tracer()
    if tracer is None:
        return NOOP_SPAN
    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    return tracer.start_as_current_span(name, attributes=clean)


def logger(name: str) -> Any:
    """A structlog logger named ``name``; configure structlog in the application to route and render it."""
    return structlog.get_logger(name)

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

__all__ = ["NOOP_SPAN", "enabled", "logger", "span"]

_tracer = trace.get_tracer("cognitive-loop")
_NOOP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


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


def enabled() -> bool:
    """Whether an OpenTelemetry SDK tracer provider is installed."""
    return not isinstance(trace.get_tracer_provider(), _NOOP_PROVIDERS)


def span(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A context manager opening a span named ``name`` (current for its body), or the no-op span.

    Attribute values of ``None`` are left out, so callers can pass optional settings as they are.
    """
    if isinstance(trace.get_tracer_provider(), _NOOP_PROVIDERS):
        return NOOP_SPAN
    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    return _tracer.start_as_current_span(name, attributes=clean)


def logger(name: str) -> Any:
    """A structlog logger named ``name``; configure structlog in the application to route and render it."""
    return structlog.get_logger(name)

"""Sandboxes for model-written code (in development; nothing exported yet)."""

__all__: list[str] = []

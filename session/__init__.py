"""Sessions: conversations, stores, conduits and the command line (in development; nothing exported yet)."""

__all__: list[str] = []

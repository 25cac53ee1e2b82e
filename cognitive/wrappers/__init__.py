"""Wrappers that hold any pattern to a budget, an answer type, or a set of verifiers.

Import the names from ``cognitive``; the modules here are private."""

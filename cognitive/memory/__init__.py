"""Memory across conversations: the ``Memory`` protocol and its stores, recall into a run as a view, the tools and
the policy that remember, and a semantic cache of answers.

Import the names from ``cognitive``; the modules here are private, but for ``cognitive.memory.checks``: the checks and
conversions a memory store of your own can share with the built-in ones."""

"""Search patterns and the runtime they share: a tree of thoughts with visit statistics, and checkpoints.

Import the names from ``cognitive``; the modules here are private."""

"""Planning and multi-stage patterns: a plan written first, then carried out by tools or by inner patterns.

Import the names from ``cognitive``; the modules here are private."""

"""The everyday patterns: a tool loop and its variants, chains and routes, sampling, and critique-and-revise loops.

Import the names from ``cognitive``; the modules here are private."""

"""Prompt templates that read values out of the conversation and earlier stages, and their path syntax.

Import the names from ``cognitive``; the modules here are private."""

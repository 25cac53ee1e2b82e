"""Context views: what of a long conversation each turn shows the model (the stored history is never rewritten).

Import the names from ``cognitive``; the modules here are private."""

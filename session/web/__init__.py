"""The chat page the HTTP conduit serves at ``/``: plain HTML, CSS and JavaScript shipped with the package (no
build step, nothing fetched from elsewhere), talking only to the conduit's own session routes."""

"""The AG-UI protocol on the HTTP conduit: ``POST /agui`` takes a ``RunAgentInput`` and streams the run as AG-UI
events, so frontends written for that protocol drive a served agent unchanged.

    agui_routes   the route, to mount in a Starlette app of one's own (``HTTPConduit`` mounts it already)
"""

from session.agui._app import agui_routes

__all__ = ["agui_routes"]

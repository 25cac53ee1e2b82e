"""The HTTP conduit: a manager's sessions over HTTP, with a resumable SSE event stream and the OpenAI-compatible
API beside them.

    HTTPConduit    serves the routes (with uvicorn on asyncio, Hypercorn on trio), or is an ASGI app
                   (``async with conduit.app(manager)``)
    RateLimit      how many POSTs a second each token may send
    EventLog       a session's events, numbered and kept, so a reader can resume (``EventReader``,
                   ``LoggedEvent``; ``EventsLost`` when a reader fell behind the kept events)
    event_to_json  the JSON form of an event, as the event stream sends it
"""

from session.http._conduit import HTTPConduit
from session.http._eventlog import EventLog, EventReader, EventsLost, LoggedEvent
from session.http._guards import RateLimit
from session.http._wire import event_to_json

__all__ = ["EventLog", "EventReader", "EventsLost", "HTTPConduit", "LoggedEvent", "RateLimit", "event_to_json"]

"""Tools of the host, callable as plain functions. Generated for this run; its source is shipped into the sandbox.

Each call sends one JSON line to the host over a pipe the sandbox set up (``SANDBOX_BRIDGE_FDS``) and blocks
until the answer comes back: no network, no polling. Calls from several threads are fine; they are sent in
order and their answers routed back to the thread that asked.

Never imported by the host; Python 3.8+ and the standard library only.
"""

import itertools
import json
import os
import sys
import threading


class ToolError(Exception):
    """A tool failed on the host (it raised, or timed out); the message says how."""


class ToolCallRefused(ToolError):
    """The host refused the call before running the tool: unknown tool, bad arguments, unsafe path, bad id."""


class ToolCallLimit(ToolCallRefused):
    """This run has used up its tool calls (``max_tool_calls``); the tool did not run."""


_ERRORS = {"ToolError": ToolError, "ToolCallRefused": ToolCallRefused, "ToolCallLimit": ToolCallLimit}
_PENDING = object()
# The longest request line the sandbox's supervisor passes on (its MAX_CALL_LINE); a longer one would reach the
# host cut, without an id to answer, and the call would wait for its answer until the run's timeout.
_MAX_LINE = 1 << 20


class _Channel:
    def __init__(self, spec):
        read_fd, write_fd = (int(n) for n in spec.split(","))
        self._read = os.fdopen(read_fd, "rb")
        self._write = write_fd
        self._ids = itertools.count(1)
        self._answers = {}
        self._cond = threading.Condition()
        self._reading = False
        self._broken = None

    def call(self, name, arguments):
        try:
            text = json.dumps(arguments, ensure_ascii=True, allow_nan=False)
            body = json.dumps({"tool": name, "args": text}, ensure_ascii=True)
        except (TypeError, ValueError, RecursionError) as exc:
            return False, ToolCallRefused("%s: the arguments cannot be sent as JSON (%s)" % (name, exc))
        if len(body) + 32 > _MAX_LINE:  # 32: room for the id
            return False, ToolCallRefused("%s: the request is %s bytes, more than the tool bridge takes (%s); pass "
                                          "less data per call" % (name, "{:,}".format(len(body)),
                                                                  "{:,}".format(_MAX_LINE)))
        with self._cond:
            if self._broken:
                return False, ToolError(self._broken)
            number = next(self._ids)
            self._answers[number] = _PENDING
            line = '{"id": %d, %s\n' % (number, body[1:])
            data = memoryview(line.encode("ascii"))
            while data:
                data = data[os.write(self._write, data):]
            # One thread at a time reads answers for everybody; the others wait to be handed theirs.
            while self._answers[number] is _PENDING:
                if self._broken:
                    del self._answers[number]
                    return False, ToolError(self._broken)
                if self._reading:
                    self._cond.wait()
                    continue
                self._reading = True
                self._cond.release()
                try:
                    raw = self._read.readline()
                finally:
                    self._cond.acquire()
                    self._reading = False
                if not raw:
                    self._broken = "the tool bridge closed: the host ended this run"
                else:
                    try:
                        answer = _read_answer(raw)
                    except (ValueError, RecursionError) as exc:
                        # Which call it answered is unknown, so no later answer can be trusted to match either.
                        self._broken = "the tool bridge sent an answer this program could not read (%s)" % (
                            str(exc)[:200],)
                    else:
                        if self._answers.get(answer.get("id")) is _PENDING:
                            self._answers[answer["id"]] = answer
                self._cond.notify_all()
            answer = self._answers.pop(number)
        if answer.get("ok"):
            return True, answer.get("value")
        error = answer.get("error")
        if not isinstance(error, dict):
            error = {}
        return False, _ERRORS.get(str(error.get("type")), ToolError)(error.get("message", "the tool call failed"))


def _read_answer(raw):
    """One answer line from the host as a dict whose id is an integer (or null); ValueError if it is not one."""
    answer = json.loads(raw)
    if not isinstance(answer, dict) or not (answer.get("id") is None or type(answer.get("id")) is int):
        raise ValueError("not an answer: %r" % (raw[:80],))
    return answer


_channel = None
_channel_lock = threading.Lock()


def _call(name, arguments):
    """(True, value) or (False, exception): the stub raises it itself, so tracebacks stay short."""
    global _channel
    if _channel is None:
        with _channel_lock:
            if _channel is None:
                spec = os.environ.get("SANDBOX_BRIDGE_FDS")
                if not spec:
                    return False, ToolError("no tool bridge in this run: tools can only be called from a "
                                            "program the sandbox started with tools")
                _channel = _Channel(spec)
    return _channel.call(name, arguments)


def _drop_unset(arguments, optional):
    return {k: v for k, v in arguments.items() if not (k in optional and v is None)}


def final(answer):
    """Give the run's final answer: prints it on a line marked ``FINAL:`` (the answer is the rest of the output)."""
    sys.stdout.write("FINAL: %s\n" % (answer,))
    sys.stdout.flush()


# -- generated stubs follow --------------------------------------------------------------------------------

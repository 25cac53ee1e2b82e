"""Programs that attack the sandbox or its tool bridge, shared by the local and the Docker tests."""

# Speaks the bridge protocol by hand: a real call, then a replayed id, a forged id, a non-integer id, a path
# climbing out of the working directory, and a tool "name" that is a path. Prints every answer as JSON.
FORGE_IDS = r"""
import json, os
r, w = (int(n) for n in os.environ["SANDBOX_BRIDGE_FDS"].split(","))
answers = os.fdopen(r, "rb")
def raw(rid, tool="add", args='{"a": 1, "b": 2}'):
    os.write(w, (json.dumps({"id": rid, "tool": tool, "args": args}) + "\n").encode())
    return json.loads(answers.readline())
print(json.dumps([raw(1), raw(1), raw(5), raw("2"),
                  raw(2, "read_note", json.dumps({"path": "../../etc/passwd"})),
                  raw(3, "../../bin/sh", "{}"), raw(4)]))
"""

# Calls a tool far past the cap and reports how the calls ended.
FLOOD = r"""
from tools import add, ToolCallLimit
ok = limited = 0
for i in range(500):
    try:
        add(a=i, b=1)
        ok += 1
    except ToolCallLimit:
        limited += 1
print(ok, limited)
"""

"""(s) The sandbox: container start-up cold and warm, the tool bridge's round trip, a 50-call program end to end.

- cold start: create + start + attach one hardened container (``DockerSandbox`` without a pool), against a
  warm-pool acquire (attach to a container the pool started earlier). Informational: the contrast is the point.
- run ``python3 -c pass``: one whole ``exec`` from a cold container and from the warm pool.
- bridge round trip: the median time of one tool call as the program inside sees it (perf_counter around each
  of ``CALLS`` calls to a trivial async tool), in Docker. Target <= 5 ms. Baseline: the same program in
  ``UnsafeLocalSandbox`` (same supervisor and bridge, no container), same run.
- 50-call program: one warm ``exec`` of a program making 50 tool calls, end to end, against the same program
  making none.

Needs Docker and the sandbox image (``python -m sandbox build-image``). Without them only the local bridge
figure is measured, and a note says so.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import anyio

from loop import tool
from sandbox import DockerSandbox, SandboxConfig, SandboxError, ToolBridge, UnsafeLocalSandbox
from sandbox._engine import DockerChannel, check_image, connect
from tests.benchmarks._harness import Figure

TARGET_MS = 5.0
CALLS = 200

ROUND_TRIPS = f"""
import time
from tools import bump
samples = []
for i in range({CALLS}):
    started = time.perf_counter()
    bump(n=i)
    samples.append(time.perf_counter() - started)
samples.sort()
print(samples[len(samples) // 2] * 1000)
"""
FIFTY = "from tools import bump\nfor i in range(50):\n    bump(n=i)\nprint('FINAL: done')\n"
NONE = "print('FINAL: done')\n"


@tool
async def bump(n: int) -> int:
    """Add one."""
    return n + 1


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


async def _round_trip_ms(sandbox: object, bridge: ToolBridge) -> float:
    result = await sandbox.exec(["python3", "-c", ROUND_TRIPS], tools=bridge)  # type: ignore[attr-defined]
    assert result.ok, result.stderr
    return float(result.stdout)


async def _timed_exec(sandbox: DockerSandbox, code: str, bridge: ToolBridge | None = None) -> float:
    started = time.perf_counter()
    result = await sandbox.exec(["python3", "-c", code], tools=bridge)
    elapsed = time.perf_counter() - started
    assert result.ok, result.stderr
    return elapsed


async def _measure(repeats: int) -> dict[str, float]:
    bridge = ToolBridge([bump], max_tool_calls=CALLS + 10)
    out = {"local_trip": statistics.median([await _round_trip_ms(UnsafeLocalSandbox(), bridge)
                                            for _ in range(3)])}
    config = SandboxConfig()
    try:
        await anyio.to_thread.run_sync(lambda: check_image(connect(), config.image))
    except SandboxError as exc:
        out["docker_missing"] = 1.0
        out["why"] = str(exc)  # type: ignore[assignment]
        return out

    cold = DockerSandbox(config)
    await cold.exec(["python3", "-c", "pass"])  # connects and checks the image once, untimed
    starts, cold_runs = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        cid, sock, _ = await cold._acquire()
        starts.append(time.perf_counter() - started)
        DockerChannel(sock).close()  # the attach stream is ours to close, unused
        await cold._dispose(cid)
        cold_runs.append(await _timed_exec(cold, "pass"))

    acquires, warm_runs, trips, fifty, zero = [], [], [], [], []
    async with DockerSandbox(config, warm=1) as warm:
        for _ in range(repeats):
            await warm.wait_warm()
            started = time.perf_counter()
            cid, sock, was_warm = await warm._acquire()
            acquires.append(time.perf_counter() - started)
            assert was_warm
            DockerChannel(sock).close()
            await warm._dispose(cid)
            await warm.wait_warm()
            warm_runs.append(await _timed_exec(warm, "pass"))
            await warm.wait_warm()
            trips.append(await _round_trip_ms(warm, bridge))
            await warm.wait_warm()
            fifty.append(await _timed_exec(warm, FIFTY, bridge))
            await warm.wait_warm()
            zero.append(await _timed_exec(warm, NONE, bridge))
    out.update(cold_start=_ms(starts), warm_acquire=_ms(acquires), cold_run=_ms(cold_runs),
               warm_run=_ms(warm_runs), trip=statistics.median(trips), fifty=_ms(fifty), zero=_ms(zero))
    return out


def run(quick: bool = False) -> list[Figure]:
    """Measure (s); ``quick`` takes fewer samples (for the smoke test)."""
    repeats = 2 if quick else 7
    m = anyio.run(_measure, repeats, backend="asyncio")
    bench = "(s) sandbox"
    local = Figure(bench, "bridge round trip, unsafe local", m["local_trip"], "ms", m["local_trip"],
                   "itself", high=TARGET_MS, target_text=f"<= {TARGET_MS:g} ms",
                   notes=(f"median of {CALLS} calls timed inside the program; no container",))
    if m.get("docker_missing"):
        return [replace(local, notes=(*local.notes, f"Docker figures skipped: {m['why']}"))]
    samples = f"median of {repeats}"
    return [
        Figure(bench, "container cold start", m["cold_start"], "ms", m["warm_acquire"], "warm-pool acquire",
               notes=(f"create + start + attach, {samples}; ratio = cold / warm",)),
        Figure(bench, "warm-pool acquire", m["warm_acquire"], "ms", m["cold_start"], "cold start",
               notes=(f"take an idle container and attach to it, {samples}",)),
        Figure(bench, "exec `python3 -c pass`, warm", m["warm_run"], "ms", m["cold_run"], "same, cold",
               notes=(f"a whole exec: job sent, program run, result back; {samples}",)),
        Figure(bench, "bridge round trip per tool call", m["trip"], "ms", m["local_trip"], "unsafe local, same run",
               high=TARGET_MS, target_text=f"<= {TARGET_MS:g} ms",
               notes=(f"median of {CALLS} calls timed inside the program, Docker, {samples} runs; the pool starts "
                      "the next container during the run, on the same cores",)),
        Figure(bench, "50-tool-call program end to end", m["fifty"], "ms", m["zero"], "same program, no calls",
               notes=(f"warm exec, {samples}; (value - baseline) / 50 = "
                      f"{(m['fifty'] - m['zero']) / 50:.2f} ms per call",)),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))

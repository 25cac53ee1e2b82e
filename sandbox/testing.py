"""``check_sandbox``: a conformance check any ``Sandbox`` implementation can run in its own tests.

In the spirit of ``trio.testing.check_one_way_stream``: give it a function that makes a sandbox and it raises
``ConformanceError`` naming the first way the sandbox breaks the ``sandbox.Sandbox`` contract.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import anyio

from loop import UsageError
from loop.errors import ConformanceError
from sandbox._protocol import ExecResult

__all__ = ["ConformanceError", "check_sandbox"]


async def check_sandbox(make: Callable[[], Any], *, python: str = "python3", timeout: float = 60.0) -> None:
    """Check that the sandbox ``make()`` returns keeps the ``Sandbox`` contract.

    ``make`` returns a sandbox, or an async context manager that yields one (it is entered for the check).
    ``python`` is how a program inside names the Python interpreter. Checked: exit status, stdout and stderr
    kept apart, stdin, files (text, bytes, nested), a fresh working directory per run (nothing leaks from
    one run to the next), ``timed_out`` and a prompt return past the timeout, unsafe file paths and bad
    arguments refused with ``UsageError``, a missing command reported as a failed result, large output
    returned without hanging, concurrent runs kept apart, and a cancelled run stopping promptly with the
    sandbox still working afterwards. Every call is bounded by ``timeout`` seconds.
    """
    made = make()
    async with contextlib.AsyncExitStack() as stack:
        sandbox = await stack.enter_async_context(made) if hasattr(made, "__aenter__") else made
        if not callable(getattr(sandbox, "exec", None)):
            raise ConformanceError(f"{sandbox!r} has no exec(argv, ...) method")
        check = _Checker(sandbox, python, timeout)
        await check.basics()
        await check.files_and_isolation()
        await check.refusals()
        await check.limits()
        await check.concurrency_and_cancellation()


class _Checker:
    def __init__(self, sandbox: Any, python: str, timeout: float) -> None:
        self.sandbox, self.python, self.timeout = sandbox, python, timeout

    async def run(self, what: str, code: str, **kwargs: Any) -> ExecResult:
        return await self.call(what, [self.python, "-c", code], **kwargs)

    async def call(self, what: str, argv: Any, **kwargs: Any) -> ExecResult:
        try:
            with anyio.fail_after(self.timeout):
                result = await self.sandbox.exec(argv, **kwargs)
        except TimeoutError:
            raise ConformanceError(f"{what}: exec did not return within {self.timeout:g} seconds") from None
        except UsageError:
            raise
        except Exception as exc:
            raise ConformanceError(f"{what}: exec raised {exc!r}") from exc
        if not isinstance(result, ExecResult):
            raise ConformanceError(f"{what}: exec returned {result!r}, not a sandbox.ExecResult")
        return result

    @staticmethod
    def expect(ok: bool, what: str, result: ExecResult | None = None) -> None:
        if not ok:
            raise ConformanceError(what + (f"; the result was {result!r}" if result is not None else ""))

    async def basics(self) -> None:
        code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
        result = await self.run("exit status", code)
        self.expect(result.exit_code == 3 and not result.ok, "a program exiting with 3 must give exit_code 3",
                    result)
        self.expect(result.stdout == "to stdout\n" and "to stderr\n" in result.stderr,
                    "stdout and stderr must be kept apart", result)
        result = await self.run("success", "print('fine')")
        self.expect(result.ok and result.stdout == "fine\n" and not result.timed_out,
                    "a program that exits 0 must be ok", result)
        for given in ("text in\nline two", b"bytes in\x00\xff"):
            code = "import sys; sys.stdout.write(sys.stdin.buffer.read().hex())"
            result = await self.run("stdin", code, stdin=given)
            expected = given.encode() if isinstance(given, str) else given
            self.expect(result.stdout == expected.hex(), f"stdin {given!r} must reach the program", result)
        result = await self.run("no stdin", "import sys; print(repr(sys.stdin.read()))")
        self.expect(result.ok and result.stdout == "''\n", "without stdin a reader must see end of input",
                    result)

    async def files_and_isolation(self) -> None:
        files = {"main.py": "print(open('data/in.txt').read() + str(len(open('blob.bin', 'rb').read())))",
                 "data/in.txt": "hello ", "blob.bin": bytes(range(256))}
        result = await self.call("files", [self.python, "main.py"], files=files)
        self.expect(result.ok and result.stdout == "hello 256\n", "files must be placed in the working directory",
                    result)
        plant = ("import os, tempfile; open('left.txt', 'w').write('x'); "
                 "open(os.path.join(tempfile.gettempdir(), 'left.txt'), 'w').write('x')")
        result = await self.run("leaving files", plant)
        self.expect(result.ok, "a program must be able to write to its working directory and temp directory",
                    result)
        look = ("import os, tempfile; print(os.path.exists('left.txt'), "
                "os.path.exists(os.path.join(tempfile.gettempdir(), 'left.txt')))")
        result = await self.run("fresh directory", look)
        self.expect(result.stdout == "False False\n", "a file left by one run must not be visible to the next",
                    result)

    async def refusals(self) -> None:
        bad: list[tuple[str, Any, dict[str, Any]]] = [
            ("argv as a string", f"{self.python} -c pass", {}),
            ("empty argv", [], {}),
            ("a file path with '..'", [self.python, "-c", "pass"], {"files": {"../escape.txt": "x"}}),
            ("an absolute file path", [self.python, "-c", "pass"], {"files": {"/etc/escape.txt": "x"}}),
            ("a zero timeout", [self.python, "-c", "pass"], {"timeout": 0}),
        ]
        for what, argv, kwargs in bad:
            try:
                result = await self.call(what, argv, **kwargs)
            except UsageError:
                continue
            raise ConformanceError(f"{what} must raise UsageError; exec returned {result!r}")
        result = await self.call("missing command", ["no-such-command-for-the-sandbox-check"])
        self.expect(not result.ok and result.exit_code != 0, "a missing command must give a failed result",
                    result)

    async def limits(self) -> None:
        result = await self.run("timeout", "while True: pass", timeout=1)
        self.expect(result.timed_out and not result.ok, "a program past its timeout must be timed_out", result)
        code = "import sys\nfor _ in range(2000): sys.stdout.write('y' * 1000 + chr(10))"
        result = await self.run("large output", code)
        self.expect(result.ok and result.stdout.startswith("y" * 1000),
                    "2 MB of output must come back (capped or not) without hanging", result)

    async def concurrency_and_cancellation(self) -> None:
        results: dict[int, ExecResult] = {}

        async def one(n: int) -> None:
            results[n] = await self.run("concurrent runs", f"print({n} * 7)")

        async with anyio.create_task_group() as group:
            for n in range(3):
                group.start_soon(one, n)
        for n, result in results.items():
            self.expect(result.stdout == f"{n * 7}\n", "concurrent runs must each get their own output", result)

        returned: list[ExecResult] = []
        with anyio.move_on_after(self.timeout) as outer:
            async with anyio.create_task_group() as group:
                async def cancel_soon() -> None:
                    await anyio.sleep(0.3)
                    group.cancel_scope.cancel()

                group.start_soon(cancel_soon)
                returned.append(await self.sandbox.exec([self.python, "-c", "import time; time.sleep(600)"],
                                                        timeout=600))
        if returned:
            raise ConformanceError(f"a run sleeping for 600 s returned before it was cancelled: {returned[0]!r}")
        if outer.cancelled_caught:
            raise ConformanceError(f"a cancelled run did not stop within {self.timeout:g} seconds")
        result = await self.run("after a cancelled run", "print('still working')")
        self.expect(result.ok and result.stdout == "still working\n",
                    "the sandbox must keep working after a cancelled run", result)

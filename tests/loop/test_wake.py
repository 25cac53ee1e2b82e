"""``Wake``: the one-shot wake-up sessions and subscriptions park on."""

import anyio

from loop._wake import Wake


async def test_a_waiter_sleeps_until_set() -> None:
    wake = Wake()
    woke: list[bool] = []

    async def waiter() -> None:
        await wake
        woke.append(True)

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert woke == [] and not wake.is_set()
        wake.set()
    assert woke == [True] and wake.is_set()


async def test_a_wake_set_before_the_wait_returns_at_once() -> None:
    wake = Wake()
    wake.set()
    wake.set()  # twice is harmless
    with anyio.fail_after(1):
        await wake


async def test_a_cancelled_waiter_leaves_the_wake_usable_and_remembers_a_late_set() -> None:
    wake = Wake()
    with anyio.move_on_after(0.01) as scope:
        await wake
    assert scope.cancelled_caught and not wake.is_set()
    wake.set()  # the waiter is gone; setting must neither raise nor be forgotten
    assert wake.is_set()


async def test_a_set_racing_a_cancellation_is_seen_by_the_cancelled_waiter() -> None:
    wake = Wake()
    seen: list[bool] = []

    async def waiter(scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await wake
            except anyio.get_cancelled_exc_class():
                seen.append(wake.is_set())
                raise

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as group:
        group.start_soon(waiter, scope)
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
        wake.set()  # before the cancelled waiter has run again
    assert seen == [True]

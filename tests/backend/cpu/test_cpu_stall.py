"""StallGuard: team regions go off after a streak of stalled calls, come back on a probe,
and back off exponentially while probes keep stalling (call times simulated by passing
earlier start times)."""

from __future__ import annotations

import time

from lowerkit.backend.cpu import StallGuard


def _call(guard: StallGuard, ms: float) -> bool:
    """One call of ``ms`` milliseconds; returns whether it ran with team regions on."""
    start = guard.begin()
    on = guard.on
    guard.end(start - ms / 1e3)
    return on


def _serial_run(guard: StallGuard, ms: float) -> int:
    """Calls that run serially before the guard tries the team again; the team's calls then
    take ``ms`` until the guard decides (back to serial, or a good call)."""
    count = 0
    while not guard.on:
        start = guard.begin()
        if guard.on:  # back on the team: this call and the next decide
            guard.end(start - ms / 1e3)
            for _ in range(StallGuard.STREAK - 1):
                if not guard.on or ms <= 2 * 5.0:
                    break
                _call(guard, ms)
            break
        guard.end(start - 0.009)
        count += 1
    return count


def test_a_short_call_must_also_lose_a_millisecond_to_stall():
    """On calls of tens of microseconds, twice the best is an interrupt's noise, not a stall: a
    streak of them keeps the team on; a streak of calls a millisecond and more over the best
    switches it off."""
    guard = StallGuard()
    for _ in range(5):
        _call(guard, 0.05)
    assert all(_call(guard, ms) for ms in [0.2, 0.9, 1.0] * 5)  # 4-20x the best, under 1 ms over it
    assert guard.on
    for _ in range(StallGuard.STREAK):
        _call(guard, 1.2)
    assert not guard.on


def test_steady_calls_keep_the_team_on():
    guard = StallGuard()
    assert all(_call(guard, ms) for ms in [5.0, 5.2, 4.9, 6.0, 9.5, 5.1] * 10)  # one 9.5 ms call is no streak


def test_a_streak_of_stalls_switches_to_serial_then_a_probe_decides():
    guard = StallGuard()
    for _ in range(5):
        _call(guard, 5.0)
    assert [_call(guard, 40.0) for _ in range(StallGuard.STREAK)] == [True] * StallGuard.STREAK
    assert not guard.on
    assert _serial_run(guard, 40.0) == StallGuard.SERIAL_CALLS - 1  # then the team stalls again
    assert not guard.on
    assert _serial_run(guard, 5.1) == 2 * StallGuard.SERIAL_CALLS - 1  # twice as long; the probe is fine
    assert guard.on and _call(guard, 5.0)
    for _ in range(StallGuard.STREAK):
        _call(guard, 40.0)
    assert _serial_run(guard, 5.0) == StallGuard.SERIAL_CALLS - 1  # the good probe reset the backoff
    assert guard.on


def test_the_backoff_is_bounded():
    guard = StallGuard()
    _call(guard, 5.0)
    for _ in range(StallGuard.STREAK):
        _call(guard, 40.0)
    runs = [_serial_run(guard, 40.0) for _ in range(8)]
    assert runs[-1] == StallGuard.MAX_SERIAL_CALLS - 1 and runs == sorted(runs)


def test_one_slow_call_back_on_the_team_is_no_verdict():
    """The first call after a pause wakes sleeping threads: a probe needs a streak to fail."""
    guard = StallGuard()
    _call(guard, 5.0)
    for _ in range(StallGuard.STREAK):
        _call(guard, 40.0)
    while not guard.on:
        _call(guard, 9.0)
    _call(guard, 40.0)  # slow wake-up
    assert guard.on
    _call(guard, 5.2)  # then fine: the backoff resets
    for _ in range(StallGuard.STREAK):
        _call(guard, 40.0)
    assert _serial_run(guard, 5.0) == StallGuard.SERIAL_CALLS - 1


def test_a_slower_machine_is_no_stall():
    """The whole machine slows down (a shared VM): team calls take 2.4x its best, serial calls
    slower still. The guard tries serial once, sees the team beat it, measures the team's best
    anew and keeps it on."""
    guard = StallGuard()
    for _ in range(5):
        _call(guard, 5.0)
    for _ in range(StallGuard.STREAK):
        _call(guard, 12.0)
    assert not guard.on
    serial = 0
    while not guard.on:
        start = guard.begin()
        if guard.on:
            guard.end(start - 0.012)  # the probe: 12 ms, the serial calls took 18
            break
        guard.end(start - 0.018)
        serial += 1
    assert serial == StallGuard.SERIAL_CALLS - 1
    assert guard.on and abs(guard.best - 0.012) < 1e-3
    assert all(_call(guard, ms) for ms in [12.0, 13.0, 11.5, 14.0] * 20)


def test_a_probe_slower_than_the_serial_calls_goes_back():
    guard = StallGuard()
    _call(guard, 5.0)
    for _ in range(StallGuard.STREAK):
        _call(guard, 40.0)
    # serial calls take 9 ms; the team, back on, 9.5: within 2x its old best, but slower than
    # the serial forms now
    assert _serial_run(guard, 9.5) == StallGuard.SERIAL_CALLS - 1
    for _ in range(StallGuard.STREAK - 1):
        _call(guard, 9.5)
    assert not guard.on

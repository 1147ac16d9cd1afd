"""team_off: team regions off on the calling thread inside the block (Team.usable() False
there), nested blocks restore the outer state, and other threads are unaffected."""

from __future__ import annotations

import threading

from lowerkit.backend.cpu import StallGuard, Team, team_off


def _team() -> Team:
    return Team(2, None, StallGuard())


def test_team_off_on_this_thread_only():
    team = _team()
    assert team.usable()
    seen = []
    with team_off():
        assert not team.usable()
        other = threading.Thread(target=lambda: seen.append(team.usable()))
        other.start()
        other.join()
        with team_off():
            assert not team.usable()
        assert not team.usable()  # the inner block restored the outer one's state
    assert team.usable()
    assert seen == [True]


def test_team_off_is_restored_after_an_error():
    team = _team()
    try:
        with team_off():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert team.usable()

"""FormTrial: runs the two forms in pairs of calls (0, 1 1, 0 0, ...), times only a call that
follows a call of its own form (from each form's third call), then keeps the form whose median timed call was faster — after
more rounds where the medians are too close to tell; a forced choice decides at once."""

from __future__ import annotations

import pytest

from lowerkit.backend.cpu import FormTrial


def _run(trial: FormTrial, seconds: dict[int, list[float]]) -> list[int]:
    """Calls until the trial decides; form f's calls take seconds[f] in turn."""
    forms, taken = [], {0: 0, 1: 0}
    while trial.choice is None:
        form = trial.form()
        forms.append(form)
        trial.record(form, seconds[form][taken[form]])
        taken[form] += 1
    return forms


def _calls(form: int, times: list[float]) -> list[float]:
    """Form ``form``'s calls in trial order with ``times`` where they are timed and 50.0 where
    not (its first two calls; a call right after the other form): form 0 runs calls 0, 3 4,
    7 8, 11 12, ... of the trial (timed: 4, 8, 12, ...), form 1 calls 1 2, 5 6, 9 10, 13 14,
    ... (timed: 6, 10, 14, ...)."""
    calls = [50.0] if form == 0 else [50.0, 50.0]
    for t in times:
        calls += [50.0, t]
    return calls + [50.0] * 4


def test_the_forms_run_in_pairs_and_only_a_repeat_is_timed():
    """A call is timed from a form's third call on, and only where it follows one of its own
    form: form 1's second call (its binding, in nnpack) is not."""
    trial = FormTrial()
    forms = _run(trial, {0: [9.0, 50.0, 3.0, 50.0, 3.1, 50.0, 3.2],
                         1: [9.0, 9.0, 50.0, 5.0, 50.0, 5.1, 50.0, 5.2]})
    assert forms == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]
    assert len(forms) == FormTrial.CALLS
    assert trial.times == ([3.0, 3.1, 3.2], [5.0, 5.1, 5.2])  # every 9.0 and 50.0 left out


@pytest.mark.parametrize("faster", [0, 1])
def test_the_faster_form_wins(faster):
    trial = FormTrial()
    _run(trial, {faster: _calls(faster, [3.0, 3.1, 3.2]), 1 - faster: _calls(1 - faster, [5.0, 5.2, 5.1])})
    assert trial.choice == faster
    assert all(trial.form() == faster for _ in range(5))


def test_one_slow_call_is_noise():
    trial = FormTrial()
    _run(trial, {0: _calls(0, [2.0, 9.0, 2.1]), 1: _calls(1, [2.5, 2.5, 2.5])})  # the machine slowed one call
    assert trial.choice == 0 and trial.scores == [2.1, 2.5]


def test_a_form_fast_only_now_and_then_loses():
    """The median decides, not the best call: a form fast once and slow twice loses."""
    trial = FormTrial()
    _run(trial, {0: _calls(0, [3.0, 6.5, 6.4]), 1: _calls(1, [3.3, 3.4, 3.3])})
    assert trial.choice == 1


def test_medians_too_close_to_tell_take_another_round():
    """Two of form 1's three calls slowed: its median is within MARGIN of form 0's, so a
    second round runs, and the medians of all six timed calls decide."""
    trial = FormTrial()
    forms = _run(trial, {0: _calls(0, [82.9, 91.7, 90.7, 71.0, 70.7, 71.6]),
                         1: _calls(1, [91.8, 65.9, 111.6, 60.1, 59.5, 61.8])})
    assert len(forms) == FormTrial.CALLS + FormTrial.ROUND_CALLS
    assert trial.choice == 1
    assert trial.scores == [(71.6 + 82.9) / 2, (61.8 + 65.9) / 2]
    assert [len(t) for t in trial.times] == [6, 6]


def test_forms_as_fast_as_each_other_stop_after_the_last_round():
    trial = FormTrial()
    rounds = FormTrial.ROUNDS
    forms = _run(trial, {0: _calls(0, [5.0, 5.1, 5.0] * rounds), 1: _calls(1, [5.1, 5.0, 5.1] * rounds)})
    assert len(forms) == FormTrial.CALLS + (rounds - 1) * FormTrial.ROUND_CALLS
    assert trial.choice == 0 and trial.scores == [5.0, 5.1]


@pytest.mark.parametrize("forced", [0, 1])
def test_a_forced_choice_needs_no_trial(forced):
    trial = FormTrial(forced)
    assert trial.choice == forced and trial.form() == forced
    trial.record(1 - forced, 0.0)  # recording after a decision changes nothing
    assert trial.choice == forced


def test_bad_forced_values_are_refused():
    with pytest.raises(ValueError, match="forced must be None, 0 or 1"):
        FormTrial(2)

"""FormTrial: alternates two forms on the first calls, skips each form's first call, then keeps
the form whose best timed call was faster; a forced choice decides at once."""

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


@pytest.mark.parametrize("faster", [0, 1])
def test_the_faster_form_wins(faster):
    slow, fast = [9.0, 5.0, 5.2], [9.0, 3.0, 3.1]  # the first call of each (9.0) is not timed
    trial = FormTrial()
    forms = _run(trial, {faster: fast, 1 - faster: slow})
    assert forms == [0, 1] * (FormTrial.WARMUP + FormTrial.TIMED)
    assert trial.choice == faster
    assert all(trial.form() == faster for _ in range(5))


def test_warm_up_calls_are_not_counted():
    """Form 0's first call is very slow (binding, first touch): it must not lose the trial."""
    trial = FormTrial()
    _run(trial, {0: [50.0, 3.0, 3.0], 1: [4.0, 4.0, 4.0]})
    assert trial.choice == 0 and trial.best == [3.0, 4.0]


def test_best_call_decides_not_the_mean():
    trial = FormTrial()
    _run(trial, {0: [1.0, 2.0, 9.0], 1: [1.0, 2.5, 2.5]})  # one slow call (the machine) is noise
    assert trial.choice == 0


@pytest.mark.parametrize("forced", [0, 1])
def test_a_forced_choice_needs_no_trial(forced):
    trial = FormTrial(forced)
    assert trial.choice == forced and trial.form() == forced
    trial.record(1 - forced, 0.0)  # recording after a decision changes nothing
    assert trial.choice == forced


def test_bad_forced_values_are_refused():
    with pytest.raises(ValueError, match="forced must be None, 0 or 1"):
        FormTrial(2)

"""Choosing between two forms of the same work by timing both on the machine that runs them.

Which of two forms is faster can depend on the machine more than on the model: a batch of
MobileNetV2 ran 10% faster image by image on the team than as batch slices on a Xeon and
30% slower on an AMD EPYC VM (docs/glow_like.md, "Threads"). A :class:`FormTrial` lets the
first calls decide. It runs the forms in pairs of calls — 0, 1 1, 0 0, 1 1, ... — and times
only a call that follows a call of its own form: the first call of a form (binding, first
touch of its memory, kernels loading) is never timed, and neither is a call right after the
other form. That one pays for the other form: after a team call, the team's OpenMP threads
spin for a while (``jit.layer``), and a batch-slices call of glow_like's MobileNetV2 at
batch 8 right after one read 39.0-39.3 ms, against 32.3-33.2 after a slices call and
32.6-33.1 after a team call and a 50 ms pause (AMD EPYC VM, Zen 4; best of 20, three runs).
Alternating call by call, a trial saw slices at 40-43 ms and picked image by image in
three processes of four. The pairs still interleave the forms in time, so a slow stretch of the
machine slows both.

After :attr:`FormTrial.TIMED` timed calls of each form, the form whose median call was
faster wins. The median, not the best call: on a noisy host a form can be fast now and then
and slow most of the time (the same model image by image read 37-39 ms at best and 65 at
the median over 40 calls), and the median of three still ignores one call the machine slowed.
"""

from __future__ import annotations


class FormTrial:
    """Which of two forms (0 or 1) the next call runs: :meth:`form` before the call,
    :meth:`record` after it with the call's seconds; :attr:`choice` is the decision (None
    while the trial runs), :attr:`scores` each form's median timed call once decided.
    ``forced`` decides at once.

    Shared by every thread calling one handle: the counters are plain attributes, updated
    without a lock (a lost update costs at most one call in the other form).
    """

    TIMED = 3  # timed calls of each form (odd: the median is one of them)
    CALLS = 4 * TIMED + 1  # the trial's calls: 0, 1 1, 0 0, ... up to each form's TIMED-th timed call

    def __init__(self, forced: int | None = None) -> None:
        if forced not in (None, 0, 1):
            raise ValueError(f"FormTrial: forced must be None, 0 or 1, got {forced!r}")
        self.choice: int | None = forced
        self.times: tuple[list[float], list[float]] = ([], [])
        self.scores: list[float] | None = None
        self._calls = 0
        self._last = -1  # the form of the last call recorded

    def form(self) -> int:
        """The form the next call runs."""
        choice = self.choice
        return choice if choice is not None else (self._calls + 1) // 2 % 2

    def record(self, form: int, seconds: float) -> None:
        """The call that ran ``form`` took ``seconds``."""
        if self.choice is not None:
            return
        self._calls += 1
        if form == self._last:
            self.times[form].append(seconds)
        self._last = form
        if min(len(t) for t in self.times) >= self.TIMED:
            self.scores = [sorted(t)[len(t) // 2] for t in self.times]
            self.choice = 0 if self.scores[0] <= self.scores[1] else 1

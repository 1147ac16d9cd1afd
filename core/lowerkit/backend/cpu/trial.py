"""Choosing between two forms of the same work by timing both on the machine that runs them.

Which of two forms is faster can depend on the machine more than on the model: a batch of
MobileNetV2 ran 10% faster image by image on the team than as batch slices on a Xeon and
30% slower on an AMD EPYC VM (docs/glow_like.md, "Threads"). A :class:`FormTrial` lets the
first calls decide. It runs the forms in pairs of calls — 0, 1 1, 0 0, 1 1, ... — and times
only a call that follows a call of its own form: the first :attr:`FormTrial.UNTIMED` calls
of a form (binding, first touch of its memory, kernels loading) are never timed, and
neither is a call right after the other form. Two, not one: an nnpack plan's second call
is the first on its planned arena (first touch of its pages; the third binds the steps to
it, and in the pairs that call always follows the other form), and its batch slices'
second call took 13.8-16.2 ms against 9.3-10.3 from then on (MobileNetV3-Small at batch 8, seven
processes; AMD EPYC Zen 3 VM); timed, it made one trial in six keep image by image (12.5 ms)
over slices. That one pays for the other form: after a team call, the team's OpenMP threads
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

Two medians within :attr:`FormTrial.MARGIN` of each other are no verdict: the trial goes on,
TIMED more timed calls of each form a round, for at most :attr:`FormTrial.ROUNDS` rounds,
each round's decision on the medians of every timed call so far. A host that slows two of
three calls picks either form that way: EfficientNet-B0 at batch 8 on nnpack, called in
turn with glow_like (``benchmarks/mixed_plan.py``), timed its slices at 91.8, 65.9 and 111.6
ms against 82.9, 91.7 and 90.7 image by image, and kept image by image (slices ran 59-60 ms
in steady state, image by image 70-71). Forms that are truly as fast as each other run every
round, at no cost: either is as good.
"""

from __future__ import annotations


class FormTrial:
    """Which of two forms (0 or 1) the next call runs: :meth:`form` before the call,
    :meth:`record` after it with the call's seconds; :attr:`choice` is the decision (None
    while the trial runs), :attr:`scores` each form's median timed call once decided (over every round).
    ``forced`` decides at once.

    Shared by every thread calling one handle: the counters are plain attributes, updated
    without a lock (a lost update costs at most one call in the other form).
    """

    TIMED = 3  # timed calls of each form a round (odd: the median is one of them)
    UNTIMED = 2  # a form's first calls, never timed
    CALLS = 4 * TIMED + 3  # a first round's calls: 0, 1 1, 0 0, ... up to each form's TIMED-th timed call
    ROUND_CALLS = 4 * TIMED  # each further round's calls
    MARGIN = 0.05  # medians closer than this (relative) are no verdict while rounds remain
    ROUNDS = 3  # rounds at most

    def __init__(self, forced: int | None = None) -> None:
        if forced not in (None, 0, 1):
            raise ValueError(f"FormTrial: forced must be None, 0 or 1, got {forced!r}")
        self.choice: int | None = forced
        self.times: tuple[list[float], list[float]] = ([], [])
        self.scores: list[float] | None = None
        self._last = -1  # the form of the last call recorded
        self._runs = [0, 0]  # calls of each form recorded
        self._judged = 0  # timed calls of each form when the trial last judged a round

    def form(self) -> int:
        """The form the next call runs."""
        choice = self.choice
        return choice if choice is not None else (self._runs[0] + self._runs[1] + 1) // 2 % 2

    def record(self, form: int, seconds: float) -> None:
        """The call that ran ``form`` took ``seconds``."""
        if self.choice is not None:
            return
        self._runs[form] += 1
        if form == self._last and self._runs[form] > self.UNTIMED:
            self.times[form].append(seconds)
        self._last = form
        timed = min(len(t) for t in self.times)
        if timed < self.TIMED or timed % self.TIMED or timed == self._judged:
            return
        self._judged = timed  # a round judged once, when both forms have completed it
        scores = [_median(t[:timed]) for t in self.times]
        fast, slow = min(scores), max(scores)
        if slow > fast * (1 + self.MARGIN) or timed >= self.TIMED * self.ROUNDS:
            self.scores = scores
            self.choice = 0 if scores[0] <= scores[1] else 1


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

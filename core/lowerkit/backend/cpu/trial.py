"""Choosing between two forms of the same work by timing both on the machine that runs them.

Which of two forms is faster can depend on the machine more than on the model: a batch of
MobileNetV2 ran 10% faster image by image on the team than as batch slices on a Xeon and
30% slower on an AMD EPYC VM (docs/glow_like.md, "Threads"). A :class:`FormTrial` lets the
first calls decide: it alternates the two forms, skips each form's first call (binding,
first touch of its memory, kernels loading), times the next ones, and from then on runs the
form whose best call was faster.
"""

from __future__ import annotations


class FormTrial:
    """Which of two forms (0 or 1) the next call runs: :meth:`form` before the call,
    :meth:`record` after it with the call's seconds; :attr:`choice` is the decision (None
    while the trial runs). ``forced`` decides at once.

    Shared by every thread calling one handle: the counters are plain attributes, updated
    without a lock (a lost update costs at most one call in the other form).
    """

    WARMUP = 1  # calls of each form not timed
    TIMED = 2  # timed calls of each form

    def __init__(self, forced: int | None = None) -> None:
        if forced not in (None, 0, 1):
            raise ValueError(f"FormTrial: forced must be None, 0 or 1, got {forced!r}")
        self.choice: int | None = forced
        self.best = [float("inf"), float("inf")]
        self._calls = 0

    def form(self) -> int:
        """The form the next call runs."""
        choice = self.choice
        return choice if choice is not None else self._calls % 2

    def record(self, form: int, seconds: float) -> None:
        """The call that ran ``form`` took ``seconds``."""
        if self.choice is not None:
            return
        calls = self._calls = self._calls + 1
        if calls > 2 * self.WARMUP:
            self.best[form] = min(self.best[form], seconds)
        if calls >= 2 * (self.WARMUP + self.TIMED):
            self.choice = 0 if self.best[0] <= self.best[1] else 1

"""Progress of a long run, reported step by step to a caller's callback (the CLI draws it as a bar).

A :data:`ProgressFn` is called ``progress(done, total, label)`` as each step starts: ``done`` steps of ``total``
are finished and ``label`` says what runs now; ``progress(total, total, "done")`` ends the run. :class:`Steps`
counts the steps of a run whose length is known up front; :meth:`Steps.nested` gives a sub-run (a capture inside a
validation) a callback of its own whose steps count as the parent's.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[int, int, str], None]


class Steps:
    """``total`` steps reported to ``progress`` (nothing when it is None)."""

    def __init__(self, progress: ProgressFn | None, total: int) -> None:
        self.progress = progress
        self.total = max(1, total)
        self.done = 0
        self._started = False

    def next(self, label: str) -> None:
        """The previous step is finished (if any) and the step ``label`` starts."""
        if self._started:
            self.done = min(self.done + 1, self.total)
        self._started = True
        if self.progress is not None:
            self.progress(self.done, self.total, label)

    def nested(self, steps: int, prefix: str = "") -> ProgressFn:
        """A callback for a sub-run that takes this run's next ``steps`` steps (the step begun before counts as
        finished); the sub-run's own count is scaled onto them and its labels get ``prefix``."""
        if self._started:
            self.done = min(self.done + 1, self.total)
            self._started = False
        base = self.done

        def report(done: int, total: int, label: str) -> None:
            self.done = min(self.total, base + steps * min(done, total) // max(1, total))
            if self.progress is not None and done < total:
                self.progress(self.done, self.total, prefix + label)

        return report

    def finish(self) -> None:
        """Every step is finished."""
        self.done = self.total
        self._started = False
        if self.progress is not None:
            self.progress(self.total, self.total, "done")

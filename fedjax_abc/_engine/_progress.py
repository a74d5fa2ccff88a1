"""Progress of a long run on stderr (a tqdm bar) or through a user callback."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Progress on stderr: rounds done, rate, time left; or a user callback."""

    def __init__(self, progress, total: int, label: str):
        if not (progress is None or isinstance(progress, bool) or callable(progress)):
            raise ValueError("progress must be True, False or a callback(rounds_done, total, "
                             f"secs), got {progress!r}")
        self.callback = progress if callable(progress) else None
        self.bar = None
        self.total = total
        self.start = time.perf_counter()
        if progress is True:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit="round", file=sys.stderr,
                            mininterval=1.0, dynamic_ncols=True)

    def skip(self, done: int):
        """Counts ``done`` rounds run before (a resumed run) on the bar."""
        if self.bar is not None and done:
            self.bar.update(done)

    def update(self, done_now: int, done_total: int):
        if self.bar is not None:
            self.bar.update(done_now)
        if self.callback is not None:
            self.callback(done_total, self.total, time.perf_counter() - self.start)

    def close(self):
        if self.bar is not None:
            self.bar.close()

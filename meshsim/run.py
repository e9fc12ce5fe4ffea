"""The run loop, written once for every machine: a scenario in, an HDF5 result and a summary out.

PLACEHOLDER
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError


class RunInterrupted(Exception):
    """The run was stopped by Ctrl-C or SIGTERM; `path` holds the incomplete result."""

    def __init__(self, path: Path, cycles_done: int):
        self.path = path
        self.cycles_done = cycles_done
        super().__init__(f"interrupted after {cycles_done} cycles; the incomplete result is {path}")


@dataclass
class RunResult:
    """What a run produced: the result file and the summary stored in its /summary group."""

    path: Path
    summary: dict


def default_output_path(scenario) -> Path:
    """results/NAME.h5 under the current directory (DESIGN.md section 6)."""
    return Path("results") / f"{scenario.name}.h5"


class _StopRequested(BaseException):
    """Ctrl-C or SIGTERM arrived: stop at the next boundary between kernel calls."""


class StopSignals:
    """While a run (or a sweep) goes, Ctrl-C and SIGTERM only ask it to stop: the engine then
    finishes the kernel call under way, so the file it keeps is consistent. A second signal stops
    at once. `also`, if given, is asked too: a run in a worker thread, which gets no signals, stops
    when it returns True. Signals are taken only in the main thread, and not where they are ignored.
    Nested inside another (a run inside a serial sweep), a signal is passed on to the outer one too,
    so the sweep stops even when the run it reached was already finishing."""

    def __init__(self, also=None):
        self.signalled = False
        self.also = also
        self.old = {}
        self.outer = None

    @property
    def requested(self) -> bool:
        return self.signalled or (self.also is not None and bool(self.also()))

    def _handler(self, signum, frame):
        if self.outer is not None:
            self.outer.signalled = True
        if self.signalled:
            raise KeyboardInterrupt
        self.signalled = True

    def __enter__(self):
        for sig in (signal.SIGINT, getattr(signal, "SIGTERM", None)):
            if sig is None:
                continue
            try:
                if signal.getsignal(sig) is signal.SIG_IGN:  # e.g. started with nohup: keep ignoring
                    continue
                self.old[sig] = signal.signal(sig, self._handler)
                if isinstance(getattr(self.old[sig], "__self__", None), StopSignals):
                    self.outer = self.old[sig].__self__
            except ValueError:  # not the main thread (a worker): leave signals alone
                pass
        return self

    def __exit__(self, *exc):
        for sig, old in self.old.items():
            signal.signal(sig, old)
        return False


def check_output_path(path) -> Path:
    """The result path, or InputError if no file can be written there (before a run starts)."""
    p = Path(path)
    if str(path).strip() == "" or p.name in ("", ".", ".."):
        raise InputError(f"-o {str(path)!r}: the result path must name a file, such as results/run.h5")
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give a file name, such as {p / 'run.h5'}")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{p}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(f"{p}: cannot write in {parent} (permission denied)")
            break
    return p



"""A run held still at a moment of its file's life, for a test to kill it there without waiting any
number of seconds: what the kill finds does not depend on how fast the host is, or how loaded.

`start_held(args, cwd, at)` starts `python -m meshsim ARGS` in a process of its own whose run,
once it reaches the moment `at`, makes the file `HELD` in `cwd` and then waits, doing nothing more,
until it is killed (`wait_held`, then `kill`):

- "flush": just before the first flush of the process's file while it runs (a fresh run's first,
  or the flush a resumed run makes at once);
- "flushed": just after it;
- "checkpoint": just after the first checkpoint the process writes.

The run is otherwise the command line's own, but that a checkpoint's writing time, where it is
guessed from the bytes of state, is guessed endless (`CHECKPOINT_BYTES_PER_SECOND` = 1, as if
the grid were far larger than the full wafer): a checkpoint at a run's first flush is then the
rule that puts the first one there, never a small grid's cheapness.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
HELD = "HELD"
#: A safety net only: a held run is waited for by the file it makes, however long that takes.
PATIENCE = 900.0

SCRIPT = """
import sys, threading
import meshsim.run
from meshsim.cli import main
from meshsim.output import ResultFile

at = sys.argv.pop(1)
meshsim.run.CHECKPOINT_BYTES_PER_SECOND = 1.0

def hold():
    open("HELD", "x").close()
    threading.Event().wait()

flush = ResultFile.flush
def flush_held(self, *args, **kwargs):
    running = self.state == "running"
    if running and at == "flush":
        hold()
    flush(self, *args, **kwargs)
    if running and at == "flushed":
        hold()
ResultFile.flush = flush_held

save = meshsim.run.save_checkpoint
def save_held(*args, **kwargs):
    written = save(*args, **kwargs)
    if at == "checkpoint":
        hold()
    return written
meshsim.run.save_checkpoint = save_held
sys.exit(main(sys.argv[1:]))
"""


def start_held(args, cwd: Path, at: str) -> subprocess.Popen:
    assert at in ("flush", "flushed", "checkpoint"), at
    (Path(cwd) / HELD).unlink(missing_ok=True)
    return subprocess.Popen([sys.executable, "-c", SCRIPT, at, *map(str, args)], cwd=cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_held(proc: subprocess.Popen, cwd: Path) -> None:
    """Wait until the run is held (its file HELD exists); AssertionError, with what it printed, if it
    ended first."""
    mark = Path(cwd) / HELD
    t0 = time.monotonic()
    while not mark.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit status {proc.returncode}) before it was held: "
                                 f"{proc.stderr.read()}")
        assert time.monotonic() - t0 < PATIENCE, "the run was never held"
        time.sleep(0.01)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group, and wait for it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()

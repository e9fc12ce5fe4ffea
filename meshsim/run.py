"""The run loop, written once for every machine: a scenario in, an HDF5 result and a summary out.

`run_scenario` is the library entry point; the command line is a thin layer over it. It asks the
registry (meshsim.machine) for the scenario's machine, compiles the scenario, lays out the result
file and then drives the machine's Run one kernel call at a time: between calls the Run writes
what the call produced, the file is flushed with a provisional summary when the Run says so, the
progress bar moves and a stop is honoured (docs/results.md: the file's life; docs/design.md: the
interface). Nothing here knows what a machine is made of.
"""

from __future__ import annotations

import math
import os
import signal
import stat
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from . import files
from . import machine as machines
from .errors import InputError, RunFailed, WriteFailed
from .threads import set_threads

if TYPE_CHECKING:
    from .result import Result


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
    """results/NAME.h5 under the current directory (docs/design.md, "Command line")."""
    return Path("results") / f"{scenario.name}.h5"


class _StopRequested(BaseException):
    """Ctrl-C or SIGTERM arrived: stop at the next boundary between kernel calls."""


class StopSignals:
    """While a run (or a sweep) goes, Ctrl-C and SIGTERM only ask it to stop: the run loop then
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
    check_run_files(p)
    return p


def run_files(final: Path) -> dict:
    """Every name a run to `final` writes, renames or removes, each with what it holds
    (docs/results.md, "Files meshsim touches")."""
    from .checkpoint import checkpoint_path
    from .output import incomplete_path, lock_path, part_path

    ck = checkpoint_path(final)
    inc = incomplete_path(final)
    return {final: "result", inc: "incomplete result", part_path(inc): "result being built",
            ck: "checkpoint", part_path(ck): "checkpoint being written", lock_path(final): "run lock"}


#: The longest file name (bytes) the file systems meshsim runs on allow.
NAME_MAX = 255


def check_run_files(final: Path) -> None:
    """InputError, before anything is written, if any name of `run_files` is taken by something
    other than a regular file: a folder, a device, a FIFO, a socket or a symbolic link."""
    from . import files

    problems = []
    for path, what in run_files(Path(final)).items():
        if len(os.fsencode(path.name)) > NAME_MAX:
            problems.append(f"{final}: its {what} would be named {path.name[:40]}... ({len(os.fsencode(path.name))} "
                            f"bytes), longer than a file name may be ({NAME_MAX}); choose a shorter name")
            break
        try:
            files.check_target(path, what)
        except InputError as e:
            problems.extend(e.problems)
    if problems:
        raise InputError(problems)




@dataclass
class Timing:
    """Where a run's time went so far: the kernel's first call (which carries compilation) apart
    from the others, and the writing between calls."""

    threads: int
    start: float = field(default_factory=time.perf_counter)
    start_cycle: int = 0  # cycles done before this process took the run up (a resumed run's)
    kernel: float = 0.0  # seconds in kernel calls after the first
    first_call: float | None = None
    first_call_units: int = 0  # cycles (or steps) the first call ran
    output: float = 0.0  # seconds writing and summing between calls

    @property
    def wall(self) -> float:
        return time.perf_counter() - self.start

    @property
    def kernel_total(self) -> float:
        return self.kernel + (self.first_call or 0.0)

    def add_call(self, seconds: float, units: int) -> None:
        if self.first_call is None:
            self.first_call, self.first_call_units = seconds, units
        else:
            self.kernel += seconds


def run_scenario(scenario, output=None, *, threads: int | None = None, progress: bool | None = None,
                 max_cycles_per_call: int | None = None, stop=None) -> RunResult:
    """Run a validated scenario on its machine and write its HDF5 result.

    output: the result path (default results/NAME.h5); threads: Numba threads (default run.threads,
    0 = the machine's choice: for the mesh one per 32,768 PEs); progress: show a progress bar
    (default: when stderr is a terminal); max_cycles_per_call: the most cycles (rdu: intervals; ipu:
    steps) per kernel call; stop: a callable asked between kernel calls, True stopping the run as
    Ctrl-C does.
    Raises InputError for a bad scenario input or output path before anything is written, and
    RunInterrupted on Ctrl-C/SIGTERM or `stop` (the file then holds everything done, and the
    checkpoint beside it lets `resume_run` go on).
    """
    from .output import RunLock

    final = check_output_path(output if output is not None else default_output_path(scenario))
    machine = machines.get(scenario.get("machine", "type"))
    timing, inputs, run = _start(machine, scenario, threads, max_cycles_per_call)  # InputError: before any file
    with RunLock(final):  # refused while another run writes the same result
        writer = _open_writer(machine, final, scenario, run, timing)
        return _go(machine, run, writer, timing, progress, stop, _checkpoint_every(scenario))


def summary_only(scenario, *, threads: int | None = None) -> dict | None:
    """The summary of a whole run of a validated scenario, with no result file written, for a
    machine whose runs allow it (machine.Machine.summary_only: the rdu); None for the others. The figures
    are those the result file's summary would hold (wall and output times aside); what a fit
    evaluates many times (meshsim.calibrate)."""
    machine = machines.get(scenario.get("machine", "type"))
    if not machine.summary_only:
        return None
    timing, _, run = _start(machine, scenario, threads, None)
    with compile_notice(machine):
        while not run.finished:
            t0 = time.perf_counter()
            n = run.advance()
            timing.add_call(time.perf_counter() - t0, n)
            run.record_nothing()
    return run.summarise(timing)


@contextmanager
def compile_notice(machine):
    """One line on stderr when Numba starts compiling a kernel while this block runs: a process's
    first run of a machine whose compiled kernels are not in the disk cache yet (a fresh install, or
    kernels changed) waits for them silently otherwise, for over a minute (the machine's
    `compile_seconds`, measured on two cores: docs/design.md, "Performance"). Loading kernels from the
    cache says nothing. Numba's event API (numba.core.event) tells a compilation from a cache load;
    without it, nothing is said."""
    try:
        from numba.core import event
    except ImportError:  # pragma: no cover - a Numba without the event API
        yield
        return
    said = []

    class Notice(event.Listener):
        def on_start(self, ev):
            if not said:
                said.append(True)
                about = f", about {machine.compile_seconds} s on two cores" if machine.compile_seconds else ""
                tqdm.write(f"meshsim: compiling the {machine.name} kernels{about}, once: later runs load them from "
                           "the cache", file=sys.stderr)

        def on_end(self, ev):
            return None

    with event.install_listener("numba:compile", Notice()):
        yield


def _start(machine, scenario, threads, per_call) -> tuple:
    """(Timing, the compiled inputs, the Run) of a scenario on its machine, with the threads set."""
    from .transformer import refuse_a_decode_run

    refuse_a_decode_run(scenario)
    timing = Timing(threads=0)
    inputs = machine.compile_scenario(scenario)
    requested = scenario.get("run", "threads") if threads is None else threads
    timing.threads = set_threads(requested, machine.default_threads(inputs))
    return timing, inputs, _started(machine, scenario, inputs, per_call)


def _started(machine, scenario, inputs, per_call):
    """The machine's Run, resumable as its machine declares (a Run of a machine from an installed
    package may also say so itself)."""
    run = machine.start(scenario, inputs, per_call=per_call)
    run.resumable = bool(machine.resumable or run.resumable)
    return run


def _open_writer(machine, final: Path, scenario, run, timing: Timing, resuming: Path | None = None):
    """The machine's writer of `final`, its layout built; a layout that cannot be written (a full
    disk) is discarded and removed, and ends the command with RunFailed (for `resuming`, the
    stopped file, saying that it and its checkpoint are as they were)."""
    from .output import abandon_layout, system_words

    try:
        return machine.open_writer(final, scenario, run, timing.threads)
    except BaseException as e:
        abandon_layout(final)
        words = system_words(e) if isinstance(e, Exception) and not isinstance(e, InputError) else None
        if words is None:
            raise
        raise RunFailed(_layout_failure_lines(final, f"laying out its file failed ({words})", resuming)) from None


def _layout_failure_lines(final: Path, why: str, resuming: Path | None) -> list:
    """What RunFailed says of a run whose file could not be laid out: nothing of it was written."""
    import shlex

    if resuming is None:
        return [f"{final}: the run could not start: {why}.",
                "Kept: nothing (nothing was written); once the cause is mended, run the scenario again."]
    return [f"{resuming}: the run cannot resume now: {why}.",
            f"Kept: {resuming} and its checkpoint, as they were.",
            f"To resume once the cause is mended: meshsim run --resume {shlex.quote(str(resuming))}"]


def resume_run(path, *, threads: int | None = None, progress: bool | None = None,
               max_cycles_per_call: int | None = None, stop=None) -> RunResult:
    """Go on with the run whose stopped file is `path` (NAME.incomplete.h5), from its checkpoint
    NAME.checkpoint.h5 (docs/results.md, "Resuming a run"): the scenario is the one in the file, and
    the finished file holds the datasets a run never stopped would hold. Options as `run_scenario`'s
    (max_cycles_per_call: by default the stopped run's, which its stops followed).
    Raises InputError (leaving the stopped file and its checkpoint as they were) when there is
    nothing to resume from, and RunInterrupted when stopped again (it resumes again the same way)."""
    from .output import RunLock

    final = _resume_final(Path(path))
    check_run_files(final)
    with RunLock(final):  # refused while a run still writes it
        return _resume_locked(final, Path(path), threads, progress, max_cycles_per_call, stop)


def _resume_locked(final: Path, given: Path, threads, progress, max_cycles_per_call, stop) -> RunResult:
    from . import __version__
    from . import checkpoint as ck
    from .output import incomplete_path, open_result_file
    from .scenario import load_scenario

    attrs = _stopped_attrs(final, given)
    path = incomplete_path(final)
    if attrs.get("meshsim_version") != __version__:
        raise InputError(f"{path}: written by meshsim {attrs.get('meshsim_version')}, and this is {__version__}: "
                         "resume it with the meshsim that started it, or run the scenario again")
    resolved = attrs["scenario_resolved"]
    scenario = load_scenario(attrs["scenario_path"] or None, text=resolved)
    if scenario.resolved_toml() != resolved:
        raise InputError(f"{path}: this meshsim reads its scenario differently from the one that wrote it; resume it "
                         "with the meshsim that started it")
    machine = machines.get(attrs["machine"])
    timing, inputs, run = _start(machine, scenario, threads, max_cycles_per_call)
    if not run.resumable:
        raise InputError(f"{path}: {machine.name} runs do not resume (they keep no checkpoint); run the scenario "
                         "again")
    point = ck.read(ck.checkpoint_path(final), path, held=int(attrs["cycles_done"]))
    if point.attrs.get("run_id") != attrs.get("run_id") or \
            point.attrs.get("scenario_sha256") != ck.scenario_digest(resolved):
        raise InputError(f"{path}: its checkpoint {point.path.name} belongs to another run of this name, so the run "
                         "cannot resume; run the scenario again")
    if point.attrs.get("inputs_sha256") != run.inputs_digest():
        where = f" ({scenario.trace_path})" if scenario.trace_path else ""
        raise InputError(f"{path}: the run's inputs differ from when it started: its trace file{where} changed, or "
                         "resolves to another file from this folder; resume it where it started, or run the scenario "
                         "again")
    if point.cycles_done > int(attrs["cycles_done"]):
        raise InputError(f"{path}: holds {attrs['cycles_done']} cycles and its checkpoint is at {point.cycles_done}: "
                         "the file was replaced by an older one; run the scenario again")
    stored = int(point.attrs.get("per_call", 0))
    if max_cycles_per_call is None and stored > 0 and stored != run.per_call:
        run = _started(machine, scenario, inputs, stored)  # the stops the stopped run followed
    writer = _open_writer(machine, final, scenario, run, timing, resuming=path)
    writer.start_cycle = writer.checkpoint_cycle = point.cycles_done
    try:
        with writer.writing("writing the resumed run's file"):
            with open_result_file(path) as old:
                writer.resume_from(old, point.lengths)
            run.restore(point.values, point.arrays, writer)
            writer.f.attrs["cycles_done"] = np.int64(run.cycle)
    except WriteFailed as e:
        writer.close_incomplete()  # the new layout alone: removed; the stopped file is as it was
        raise RunFailed(_layout_failure_lines(final, e.why, path)) from None
    except BaseException as e:
        writer.close_incomplete()  # the new layout alone: removed; the stopped file is as it was
        if isinstance(e, (OSError, KeyError, TypeError, ValueError)):
            raise InputError(f"{path}: cannot resume from {point.path.name} ({type(e).__name__}: {e}); the file and "
                             "its checkpoint are as they were") from None
        raise
    timing.start_cycle = run.cycle
    return _go(machine, run, writer, timing, progress, stop, _checkpoint_every(scenario), resumed=True)


def _checkpoint_every(scenario) -> float:
    """output.checkpoint_every_seconds (a machine whose runs do not resume keeps none whatever it says)."""
    return float(scenario.get("output", "checkpoint_every_seconds"))


def _resume_final(given: Path) -> Path:
    """NAME.h5 of the run that `given` (what --resume named) is the stopped file of; InputError,
    naming it, for anything but a result file's name or a regular file (before any lock is taken,
    so that nothing is made or removed beside a file that is not a run's)."""
    try:
        st = os.stat(given)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError(f"--resume {given}: cannot be read ({e.strerror or e})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"--resume {given}: is {files.kind_of(st.st_mode)}; --resume takes a stopped run's "
                         "NAME.incomplete.h5")
    if given.suffix != ".h5" or given.name in (".h5", ".incomplete.h5"):
        raise InputError(f"--resume {given}: not a result file; --resume takes a stopped run's NAME.incomplete.h5")
    return _final_of(given)


def _final_of(path: Path) -> Path:
    """NAME.h5 for NAME.incomplete.h5 (or NAME.h5 itself)."""
    name = path.name
    if name.endswith(".incomplete" + path.suffix):
        return path.with_name(name[: -len(".incomplete" + path.suffix)] + path.suffix)
    return path


def _stopped_attrs(final: Path, given: Path) -> dict:
    """The root attributes of the stopped run whose result is `final` (its NAME.incomplete.h5);
    InputError, naming `given` (what the user named), if there is none to resume."""
    from .checkpoint import checkpoint_path
    from .output import incomplete_path, open_result_file, plain

    inc = incomplete_path(final)
    if not os.path.lexists(inc):
        if os.path.lexists(final):
            done = _complete_run_id(final)
            if done is None:
                raise InputError(f"{given}: not a complete meshsim result, and no {inc.name} beside it: there is no "
                                 "stopped run to resume")
            # a checkpoint of this run beside its complete file is what a stop just after finishing left
            ck = checkpoint_path(final)
            if _checkpoint_run_id(ck) == done:
                files.remove(ck)
            where = "" if given == final else f" ({final})"
            raise InputError(f"{given}: the run is complete{where}: there is nothing to resume")
        raise InputError(f"{given}: no such result file (a stopped run's file is NAME.incomplete.h5)")
    try:
        with open_result_file(inc) as f:
            attrs = {k: plain(v) for k, v in f.attrs.items()}
    except OSError as e:
        raise InputError(f"{inc}: cannot be read as a result file ({e})") from None
    for key in ("machine", "scenario_resolved", "scenario_path", "run_id", "cycles_done", "complete"):
        if key not in attrs:
            raise InputError(f"{inc}: has no {key} attribute: not a result file this meshsim can resume")
    if bool(attrs["complete"]):
        raise InputError(f"{inc}: the run is complete: there is nothing to resume")
    return attrs


def _complete_run_id(path: Path) -> str | None:
    """The run_id of the complete meshsim result at `path`, or None if it is not one."""
    from .output import open_result_file, plain

    try:
        with open_result_file(path) as f:
            a = {k: plain(f.attrs[k]) for k in ("complete", "run_id", "schema_version") if k in f.attrs}
    except (OSError, RuntimeError):
        return None
    return str(a["run_id"]) if a.get("complete") is True and "run_id" in a and "schema_version" in a else None


def _checkpoint_run_id(path: Path) -> str | None:
    """The run_id a checkpoint file at `path` names, or None."""
    import h5py

    from .output import plain

    if not files.is_regular(path):
        return None
    try:
        with h5py.File(path, "r") as f:
            return str(plain(f.attrs["run_id"]))
    except (OSError, KeyError, RuntimeError):
        return None


def _go(machine, run, writer, timing: Timing, progress, stop, checkpoint_every: float,
        resumed: bool = False) -> RunResult:
    """Drive `run` into `writer` to its end or a stop (docs/results.md, "The life")."""
    if progress is None:
        progress = sys.stderr.isatty()
    stop_signals = StopSignals(stop)
    bar = tqdm(total=run.total, initial=run.done, unit=machine.unit, disable=not progress, delay=2.0,
               file=sys.stderr, dynamic_ncols=True)
    try:
        with writer, stop_signals:
            if resumed:  # a provisional summary at once: a kill before the next flush keeps one
                with writer.writing():
                    run.prepare_flush(writer)
                    writer.flush(run.cycle, run.summarise(timing))
            else:
                _remove_checkpoint(writer)  # of an earlier run of this name, whose file this one replaced
            try:
                with compile_notice(machine):
                    _drive(run, writer, timing, bar, stop_signals, checkpoint_every)
            except (KeyboardInterrupt, _StopRequested) as e:
                with writer.writing():
                    run.catch_up(writer)  # stopped between the kernel call and its output
                    if isinstance(e, _StopRequested) and run.resumable:
                        # a stop at a boundary: the checkpoint moves up to it, so nothing done is run again
                        writer.flush(run.cycle, run.summarise(timing))
                        save_checkpoint(run, writer)
                    path, _ = _finish(run, writer, timing, complete=False)
                raise RunInterrupted(path, run.cycle) from None
            with writer.writing():
                path, summary = _finish(run, writer, timing, complete=True)
            _remove_checkpoint(writer)
    except WriteFailed as e:
        raise RunFailed(_failure_lines(e, run, writer)) from None
    finally:
        bar.close()
    return RunResult(path=path, summary=summary)


def _failure_lines(e: WriteFailed, run, writer) -> list:
    """What RunFailed says when a write failed: what failed, what was kept, and how to go on."""
    import shlex

    from .checkpoint import checkpoint_path

    path, final = writer.path, writer.final_path
    if writer.state == "building":  # SWMR never started: the file (a stopped run's, if resumed) is as it was
        return _layout_failure_lines(final, e.why, path if writer.start_cycle is not None else None)
    lines = [f"{final}: the run stopped at cycle {run.cycle:,}: {e.why}."]
    scenario = writer.scenario_path
    again = "run the scenario again" + (f" (meshsim run {shlex.quote(scenario)} ...)" if scenario else "")
    if e.vanished or (writer.state != "building" and not files.is_regular(path)):
        files.remove(checkpoint_path(final))  # nothing can resume from it without its file
        lines.append(f"Kept: nothing: the run's data went with {path.name}, and its checkpoint is removed; {again}.")
        return lines
    if writer.flushed_cycle is None:
        lines.append(f"Kept: nothing of this run (it failed before its first flush); once the cause is mended, "
                     f"{again}.")
        return lines
    kept = f"Kept: {path}, as of its last flush at cycle {writer.flushed_cycle:,}"
    ck = writer.checkpoint_cycle
    if run.resumable and ck is not None and files.is_regular(checkpoint_path(final)):
        lines.append(f"{kept}, and its checkpoint at cycle {ck:,}; `meshsim report` reads the file as it is.")
        fix = {28: "there is free space again", 27: "the file-size limit allows more"}.get(e.errno, "the cause is "
                                                                                                 "mended")
        lines.append(f"To go on from cycle {ck:,} once {fix}: meshsim run --resume {shlex.quote(str(path))}")
    else:
        why = "keep no checkpoint" if not run.resumable else "had written no checkpoint yet"
        lines.append(f"{kept}; `meshsim report` reads it as it is. It cannot resume (its runs {why}); {again}.")
    return lines


def save_checkpoint(run, writer) -> bool:
    """The checkpoint of the state just flushed (meshsim.checkpoint), beside the result, after the
    flush is forced to disk. One that cannot be written (a full disk) is a warning: the run goes on,
    and resumes from the one before. Returns whether it was written."""
    from . import checkpoint as ck

    values, arrays = run.checkpoint()
    a = writer.f.attrs
    path = ck.checkpoint_path(writer.final_path)
    with writer.writing("forcing the result to disk"):  # a checkpoint must never be ahead of the file on disk
        writer.sync()
    try:
        ck.write(path, machine=str(a["machine"]), run_id=writer.run_id, resolved=str(a["scenario_resolved"]),
                 inputs=run.inputs_digest(), per_call=run.per_call, cycles_done=run.cycle, done=run.done,
                 lengths=writer.lengths(), values=values, arrays=arrays)
    except (OSError, InputError) as e:
        why = e.problems[0] if isinstance(e, InputError) else (e.strerror or e)
        print(f"meshsim: warning: {path}: the checkpoint at cycle {run.cycle} could not be written "
              f"({why}); the run goes on, and would resume from the one before", file=sys.stderr)
        return False
    writer.checkpoint_cycle = run.cycle
    return True


def _remove_checkpoint(writer) -> None:
    """Remove the checkpoint beside the writer's file, and what a kill while one was written left."""
    from .checkpoint import checkpoint_path

    path = checkpoint_path(writer.final_path)
    for p in (path, path.with_name(path.name + ".part")):
        try:
            files.remove(p)
        except OSError as e:
            print(f"meshsim: warning: {p} could not be removed ({e.strerror or e}); remove it by hand",
                  file=sys.stderr)


#: Checkpoints take at most this share of a run's time: one waits 1 / share times as long as the
#: last took to write (docs/results.md, "Resuming a run").
CHECKPOINT_SHARE = 0.05
#: What a resumed run guesses its first checkpoint's writing time from (gzip level 1 on one core
#: writes the full wafer's 189 MB of state in about a second).
CHECKPOINT_BYTES_PER_SECOND = 2e8


class CheckpointClock:
    """When a resumable run's checkpoint is due after a flush (docs/results.md, "Resuming a run"):
    at the first flush of a run that has none yet, whatever the grid; after that, at the first flush
    `every` seconds (output.checkpoint_every_seconds) after the last one, whatever it costs, or, with
    `every` = 0, once 1 / CHECKPOINT_SHARE times as long as the last one took to write has passed.
    `now` is when the run started (or resumed), `have_one` whether a checkpoint of it already exists
    (a resumed run's), `guess` the seconds the next one is expected to take (a resumed run's first).
    Times are passed in, so that the rule reads no clock of its own."""

    def __init__(self, every: float, now: float, have_one: bool, guess: float):
        self.every = float(every)
        self.last = now  # when the last checkpoint was written (or the run started or resumed)
        self.cost = guess  # seconds the last one took to write
        self.have_one = have_one

    def due(self, now: float) -> bool:
        if not self.have_one:
            return True
        wait = self.every if self.every > 0 else self.cost / CHECKPOINT_SHARE
        return now - self.last >= wait

    def tried(self, began: float, ended: float) -> None:
        """A checkpoint was written (or failed, with a warning) from `began` to `ended`."""
        self.have_one = True
        self.last, self.cost = ended, ended - began


def _drive(run, writer, timing: Timing, bar, stop_signals, checkpoint_every: float) -> None:
    """Kernel call, output, flush (then, when CheckpointClock says one is due, a checkpoint),
    progress, until the run is finished or asked to stop. A machine that flushes by time gets its
    first flush after the first kernel call (infinite seconds since a flush), so that a run killed
    any time after that keeps a summary, however short the run."""
    last_flush = None
    clock = None
    if run.resumable:
        clock = CheckpointClock(checkpoint_every, time.perf_counter(), writer.checkpoint_cycle is not None,
                                run.checkpoint_bytes() / CHECKPOINT_BYTES_PER_SECOND)
    while not run.finished:
        t0 = time.perf_counter()
        n = run.advance()
        timing.add_call(time.perf_counter() - t0, n)
        t_out = time.perf_counter()
        with writer.writing():
            run.record(writer)
            due = run.flush_due(math.inf if last_flush is None else time.perf_counter() - last_flush)
            if due:
                run.prepare_flush(writer)
                writer.flush(run.cycle, run.summarise(timing))  # provisional: a killed run still has one
        if due:
            last_flush = time.perf_counter()
            if clock is not None and not run.finished and clock.due(last_flush):
                save_checkpoint(run, writer)  # after the flush: never ahead of the file
                clock.tried(last_flush, time.perf_counter())  # written or not (a full disk): the rule goes on
        bar.update(run.done - bar.n)
        timing.output += time.perf_counter() - t_out
        if stop_signals.requested and not run.finished:
            raise _StopRequested


def _finish(run, writer, timing: Timing, complete: bool):
    if writer.state == "running":  # the file as a kill now would leave it, should finishing fail
        run.prepare_flush(writer)
        writer.flush(run.cycle, run.summarise(timing))
    run.write_final(writer)
    summary = run.summarise(timing)
    return writer.finish(summary, run.cycle, complete=complete), summary


def run(scenario, overrides=None, /, *, out=None, threads: int | None = None, progress: bool = False,
        **sections) -> Result:
    """`meshsim.run(...)`: run a scenario and return its Result (docs/design.md, "Python API").

    scenario: a TOML file's path, a dict shaped like one ({"machine": {...}, ...}), or a Scenario.
    overrides: {"section.key": value} or a list of "section.key=value" strings, as on the command line.
    **sections: more overrides by section: `machine={"rows": 64}`, `migration={"policy": "none"}`.
    out: the result file (default results/NAME.h5, as the command line); threads: Numba threads
    (default run.threads); progress: show the progress bar.
    Raises InputError (with every problem, one line each) for bad input before anything is written,
    and RunInterrupted when stopped (its file holds everything done)."""
    from .result import Result
    from .scenario import Scenario, load_scenario, scenario_from_dict

    pairs = _override_pairs(overrides, sections)
    if isinstance(scenario, Scenario):
        # from its own text and overrides, so that presets and a model config fill what the new ones leave
        sc = load_scenario(scenario.path, [*scenario.overrides, *pairs], text=scenario.source_text) if pairs \
            else scenario
    elif isinstance(scenario, dict):
        sc = scenario_from_dict(scenario, None, pairs)
    elif isinstance(scenario, (str, Path)):
        sc = load_scenario(scenario, pairs)
    else:
        raise InputError(f"scenario = {scenario!r}: must be a scenario file's path, a dict of sections or a "
                         "Scenario")
    result = run_scenario(sc, out, threads=threads, progress=progress)
    return Result(result.path)


def resume(path, /, *, threads: int | None = None, progress: bool = False) -> Result:
    """`meshsim.resume(path)`: go on with the stopped run whose file is `path` (NAME.incomplete.h5)
    from its checkpoint, and return its Result (docs/results.md, "Resuming a run"). threads and
    progress as for `run`. Raises InputError when it cannot resume, RunInterrupted when stopped again."""
    from .result import Result

    return Result(resume_run(path, threads=threads, progress=progress).path)


def _override_pairs(overrides, sections) -> list:
    pairs = []
    if overrides is None:
        pass
    elif isinstance(overrides, dict):
        pairs.extend(overrides.items())
    elif isinstance(overrides, (list, tuple)):
        pairs.extend(overrides)
    else:
        raise InputError(f"overrides = {overrides!r}: must be a dict of \"section.key\": value, or a list of "
                         "\"section.key=value\" strings")
    for section, table in sections.items():
        if not isinstance(table, dict):
            raise InputError(f"{section} = {table!r}: a keyword argument names a section and takes a dict of its "
                             f"keys, e.g. {section}={{...}}; the result file is out=")
        pairs.extend((f"{section}.{key}", value) for key, value in table.items())
    return pairs


class _CallableModule(type(sys)):
    """`meshsim.run` is this module, and calling it is `run` above: the Python API's name and the run
    loop's module are one name, and `from meshsim.run import run_scenario` stays as it was."""

    def __call__(self, scenario, overrides=None, /, **kwargs):
        return run(scenario, overrides, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

"""What a machine is to the rest of meshsim: one package behind the small interface below, chosen
by name (the scenario's `machine.type`, the result file's `machine` attribute) from a registry.

A machine compiles a validated scenario into its inputs, allocates the state of one run, advances
it one kernel call at a time, writes its datasets and summarises. Everything around that (the run
loop, stop signals, the progress bar, flushing, the result file's life, the command line, report)
is written once, in meshsim.run, meshsim.output, meshsim.cli and meshsim.report, and names no
machine. docs/design.md describes the interface; a new machine is a package with a `MACHINE` and
one line, `register(MACHINE)` (the three built in ones are registered by name below and imported
when first asked for).
"""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod

from .errors import InputError, closest

#: The built-in machines: name -> the module that defines MACHINE (imported on first use, so that
#: asking for one machine does not import, nor compile, the others).
BUILTIN = {"mesh": "meshsim.mesh.machine", "rdu": "meshsim.rdu.machine", "ipu": "meshsim.ipu.machine"}

_REGISTRY: dict = {}
# Bumped by every register and unregister: what the composed parameter table is checked against.
_GENERATION = [0]


class Run(ABC):
    """One run of a machine: its state between kernel calls, and what it writes and reports.

    meshsim.run.run_scenario drives it: while not `finished`, `advance()` (one kernel call), then
    `record(writer)` (write what that call produced), then, when `flush_due(...)`, `prepare_flush`
    and the writer's flush with `summarise(timing)`. On a stop between `advance` and `record`,
    `catch_up(writer)` writes what the last call produced; at the end `write_final(writer)` writes
    the totals and the summary is taken once more.
    """

    #: the progress bar's total, in the machine's unit (cycles, sections, steps)
    total: int = 0

    @property
    @abstractmethod
    def finished(self) -> bool:
        """Whether the run has done everything it was asked to."""

    @property
    @abstractmethod
    def done(self) -> int:
        """Progress so far, in the unit of `total`."""

    @property
    @abstractmethod
    def cycle(self) -> int:
        """Cycles simulated so far (the result file's cycles_done)."""

    @abstractmethod
    def advance(self) -> int:
        """One kernel call; returns how many cycles (or steps) it ran."""

    @abstractmethod
    def record(self, writer) -> None:
        """Write what the last `advance` produced, and add it to the running figures."""

    def catch_up(self, writer) -> None:
        """After a stop between `advance` and `record`: write what the file still lacks."""
        return None

    @abstractmethod
    def flush_due(self, seconds_since_flush: float) -> bool:
        """Whether the file should be flushed now (after `record`). `seconds_since_flush` is infinite
        until the run's first flush, so that a machine that flushes by the clock flushes after its
        first kernel call."""

    def prepare_flush(self, writer) -> None:
        """Checks and in-place totals before a flush."""
        return None

    @abstractmethod
    def summarise(self, timing) -> dict:
        """The run's figures so far (meshsim.run.Timing: wall, kernel and output seconds, threads)."""

    def write_final(self, writer) -> None:
        """The totals and tables written once, before the file is finished."""
        return None

    #: whether this run goes on from its checkpoint: its machine's `resumable`, which the run loop
    #: copies here when it starts the run (meshsim.run)
    resumable: bool = False
    #: the most cycles (or steps) of one kernel call, where the machine's stops depend on it (a
    #: checkpoint keeps it, and a resumed run follows it)
    per_call: int = 0

    def record_nothing(self) -> None:
        """Add what the last `advance` produced to the running figures, writing nothing."""
        raise NotImplementedError

    def inputs_digest(self) -> str:
        """A hash of what the run read besides its scenario (a trace's events, say): a resumed run
        must read the same."""
        return ""

    def checkpoint(self) -> tuple:
        """The whole state between kernel calls, after `record` (meshsim.checkpoint): (values, a
        dict that JSON takes; arrays, name -> numpy array). A run restored from it goes on exactly
        as this one would."""
        raise NotImplementedError

    def checkpoint_bytes(self) -> int:
        """About how many bytes `checkpoint` gives: what a resumed run's first checkpoint's cost is
        guessed from (meshsim.run.CheckpointClock)."""
        return 0

    def restore(self, values: dict, arrays: dict, writer) -> None:
        """Take the state `checkpoint` gave, in a Run just started from the same scenario; `writer`
        already holds the rows of the datasets up to the checkpoint."""
        raise NotImplementedError


class TokenRun(Run):
    """A generation between calls, on any machine: its `state` decodes up to `per_call` tokens a call
    (`state.advance(n)` returns the new rows of its file's tables, `state.tokens_done`, `state.cycle`
    and `state.finished` say where it is), and its writer appends those rows (meshsim.output.TokenTables).
    A machine's run adds how it opens its writer, its totals, its summary and its checkpoint."""

    def __init__(self, state, total: int, per_call: int):
        self.state = state
        self.total = total
        self.per_call = per_call
        self._rows = None

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def done(self) -> int:
        return self.state.tokens_done

    @property
    def cycle(self) -> int:
        return self.state.cycle

    def advance(self) -> int:
        before = self.state.tokens_done
        self._rows = self.state.advance(self.per_call)
        return self.state.tokens_done - before

    def record(self, writer) -> None:
        writer.append(*self._rows)

    def record_nothing(self) -> None:
        return None

    def catch_up(self, writer) -> None:
        if writer.n < self.state.tokens_done:
            writer.append(*self._rows)

    def flush_due(self, seconds_since_flush: float) -> bool:
        return seconds_since_flush >= 1.0


class MachineRunner(ABC):
    """What a run of a machine needs (meshsim.run, meshsim.cli's validate, meshsim.scenario,
    meshsim.roofline): compile a scenario, check it, start a Run and open its result file."""

    #: the value of machine.type and of a result file's `machine` attribute
    name: str = ""
    #: what the progress bar counts
    unit: str = "cycle"
    #: whether its Run's `record_nothing` stands in for `record`: a run's summary then needs no result
    #: file (meshsim.run.summary_only)
    summary_only: bool = False
    #: the workload types (workload.type) it runs
    workloads: tuple = ()
    #: its own scenario keys (meshsim.params.Param rows, each applying only where it means something,
    #: usually machine.type = this machine), which meshsim.params.PARAMS composes with the shared ones
    params: tuple = ()
    #: chips whose published figures fill its keys a scenario leaves out (machine.preset): name ->
    #: {key: value}; and the one a scenario that names none gets
    presets: dict = {}
    default_preset: str = ""
    #: keys it once had under other names, "section.old" -> "section.new": a scenario may still use
    #: the old name, with a warning
    aliases: dict = {}
    #: whether a stopped run of it goes on from its checkpoint (`meshsim run --resume`): its Run then
    #: implements `checkpoint` and `restore`, and output.checkpoint_every_seconds applies to it
    resumable: bool = False
    #: about how many seconds its kernels take to compile the first time, on two cores (what the
    #: notice of meshsim.run.compile_notice says; 0: no figure)
    compile_seconds: int = 0

    @abstractmethod
    def compile_scenario(self, scenario):
        """The inputs of a run of a validated scenario; InputError for what a run would refuse
        (before any file exists)."""

    def validate(self, scenario):
        """What `meshsim validate` checks beyond the scenario's keys: by default, that the scenario
        compiles (InputError for what a run would refuse); returns what `describe` reads."""
        return self.compile_scenario(scenario)

    def default_threads(self, inputs) -> int:
        """Threads for run.threads = 0 (a machine whose kernels are serial: one)."""
        return 1

    def check_scenario(self, ok, get, add, shown, path=None) -> None:
        """What only this machine asks of a scenario, beyond each key's own range and the keys that
        apply to it (meshsim.scenario calls it while validating): each problem through
        `add(key, other_keys, message)` (or `add(key, other_keys, None, text=...)` for a problem not
        worded "KEY = VALUE: message"); `ok(*keys)` says whether keys are valid, `get(key)` and
        `shown(key)` give a value and its text; `path` is the scenario file's (None for a dict)."""
        return None

    @abstractmethod
    def start(self, scenario, inputs, per_call: int | None = None) -> Run:
        """A run's state; `per_call` bounds the cycles (or steps) of one kernel call."""

    @abstractmethod
    def open_writer(self, path, scenario, run: Run, threads: int):
        """The run's result file (a meshsim.output.ResultFile), laid out and ready for appends."""

    def describe(self, label: str, scenario, inputs) -> str:
        """The line `meshsim validate` prints for a valid scenario."""
        return f"{label}: valid ({self.name})"

    def platform(self, values: dict):
        """The roofline (meshsim.roofline.Platform) of a resolved scenario of this machine
        (`Scenario.values`), or None if it has none."""
        return None

    def bench(self, quick: bool = False, cycles: int = 300, log=print) -> dict:
        """Its part of `meshsim bench` (meshsim.bench): figures of its speed, start-up and memory,
        each printed through `log`; {} if it measures nothing."""
        return {}

    def platform_presets(self) -> dict:
        """The published chips of this machine on a roofline (meshsim roofline's reference lines and
        the platform table): key -> meshsim.roofline.Platform, with their sources in the machine's
        doc; {} if it has none."""
        return {}

    def roofline_kernels(self, values: dict, platform) -> list | None:
        """The kernels of a resolved scenario on a roofline, as rows like meshsim.roofline.kernels'
        (name, kind, flops, bytes, intensity, attainable_flops, bound), when this machine moves other
        bytes than an operator's own (None: the transformer's operators, meshsim.roofline.kernels)."""
        return None


class ResultReader:
    """What reading a machine's result file needs (meshsim.report, meshsim.analysis,
    meshsim.export, meshsim.plots, meshsim.result): its figures, lines, regions and timeline. It
    needs nothing of a run: a result is read without compiling anything."""

    #: the value of a result file's `machine` attribute
    name: str = ""
    #: what one unit of its load balance is ("PEs", "PCUs", "tiles")
    unit_label: str = "units"
    #: the dataset of every unit's busy cycles in its result file
    busy_dataset: str = "units/busy_cycles"
    #: the group of its values along its time (meshsim.result.Result.series)
    series_group: str = "series"
    #: the LI a run of it is expected to reach (meshsim report's default --target)
    target_li: float = 0.9
    #: what its levers move (lever_note): "section.key" -> (figures it moves, why it leaves the rest)
    levers: dict = {}

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list | None:
        """The machine's lines of the one-screen summary (meshsim.report.format_summary); None: the
        lines every machine's figures allow (meshsim.report.generic_lines)."""
        return None

    def read_regions(self, f, path) -> dict | None:
        """Per-region whole-run figures of an open result file (name -> array), or None."""
        return None

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict | None:
        """The figures `meshsim report` recomputes from an open result file: {"whole": {...},
        "windows": {...}} and any machine-specific tables (meshsim.analysis); None: the load
        balance of `busy_dataset` alone (meshsim.analysis.busy_only)."""
        return None

    def judged(self, analysis: dict) -> dict:
        """The LI `meshsim report` judges against the target, from an analysis: {"figure": its name
        in analysis["whole"], "what": what it measures}; by default the busy-time LI over every
        unit, the whole run."""
        return dict(figure="li", what=f"busy-time LI over all {self.unit_label}, the whole run")

    def trace_events(self, f, values: dict, timeline) -> None:
        """Add the run's timeline, read from the open result file `f`, to `timeline` (meshsim.export.Timeline):
        slices, counters and the names of processes and threads. A machine without one says so."""
        raise InputError(f"a {self.name} result has no timeline to export")

    def lever_note(self, key: str, figure: str) -> str | None:
        """Why the scenario key `key` (as "section.key") does not move `figure`, the LI `report`
        judges, when runs that differ in it show the same figure; None: nothing to say beyond that.
        By default from `levers`: key -> (the figures it moves, why it leaves the others)."""
        if key not in self.levers:
            return None
        moves, why = self.levers[key]
        if figure in moves:
            return f"on the {self.name} {key} moves {', '.join(moves)}, but not {figure} between these runs"
        return f"on the {self.name} {key} moves {', '.join(moves)}: {why}"

    def findings(self, analysis: dict, add) -> None:
        """Machine-specific findings of report's diagnosis, each through `add(text, evidence)`."""
        return None


class Machine(MachineRunner, ResultReader):
    """A machine model: what a run needs (MachineRunner) and what reading its results needs
    (ResultReader). A machine package defines one and registers it."""


def register(machine: Machine) -> Machine:
    """Make `machine` available by its name (to scenarios, run, report and sweeps)."""
    if not machine.name:
        raise ValueError("a machine needs a name")
    _REGISTRY[machine.name] = machine
    _GENERATION[0] += 1
    return machine


def registry_key() -> tuple:
    """What the registry holds now, as a value that changes when a machine is registered or
    removed (meshsim.params composes its table again then)."""
    return _GENERATION[0], tuple(_REGISTRY), names()


def unregister(name: str) -> None:
    """Make the machine called `name` unavailable again (a machine a test defined, say)."""
    _REGISTRY.pop(name, None)
    _GENERATION[0] += 1


def names() -> tuple:
    """The machines' names: the built-in ones, then those registered since and those installed
    packages declare (entry points of the group "meshsim.machines"), in order."""
    return tuple(dict.fromkeys([*BUILTIN, *_REGISTRY, *(e.name for e in _plugins())]))


@functools.lru_cache(maxsize=1)
def _plugins() -> tuple:
    """Machines installed packages declare: entry points of the group "meshsim.machines", each a
    module that registers its machine when imported (name = the machine's name)."""
    from importlib.metadata import entry_points

    return tuple(entry_points(group="meshsim.machines"))


def _load_plugin(name: str) -> None:
    for e in _plugins():
        if e.name == name:
            e.load()  # registers itself
            return


def all_machines() -> tuple:
    """Every machine of the registry, in the order of `names()`, the built-in ones loaded. One an
    installed package declares that cannot be loaded is left out, with a warning, rather than
    stopping every command (its own runs and results still say why when asked for by name)."""
    import warnings

    out = []
    for name in names():
        try:
            out.append(get(name))
        except Exception as e:
            if name in BUILTIN:
                raise
            warnings.warn(f"machine {name!r} could not be loaded ({e}); its keys are left out", RuntimeWarning,
                          stacklevel=2)
    return tuple(out)


def get(name: str) -> Machine:
    """The machine called `name`; InputError, suggesting the closest name, if there is none."""
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(BUILTIN[name])  # registers itself
    if name not in _REGISTRY:
        _load_plugin(name)
    if name not in _REGISTRY:
        known = names()
        match = closest(str(name), known)
        hint = f"; did you mean {match!r}?" if match else ""
        raise InputError(f"machine {name!r}: no such machine; the machines are {', '.join(known)}{hint}")
    return _REGISTRY[name]

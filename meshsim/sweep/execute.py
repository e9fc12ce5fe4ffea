"""Sweeps: one scenario run at many points of its parameters, serially or through Dask (DESIGN.md
section 7; the file format is in docs/sweeps.md).

A sweep is a flat list of points, each an id, the overrides it applies to the base scenario and its
seed. `run_point` is the one pure function that runs a point, in this process or on a Dask worker:
it writes the point's own result file and returns the path and the summary row, never arrays.
`run_sweep` hands the points that are not yet complete to Dask (or runs them one after another),
collects the rows by point id and writes the summary table: the CSV as points finish, the CSV and
the HDF5 table at the end.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import datetime
import hashlib
import itertools
import json
import math
import os
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tomli_w
from distributed.diagnostics.plugin import WorkerPlugin

from . import __version__
from .errors import InputError

#: Keys of the [sweep] table: (type, description). docs/sweeps.md lists the same.
SWEEP_KEYS = {
    "base": (str, "the base scenario file, relative to the sweep file (or an inline [base] table)"),
    "name": (str, "the sweep's name (default: the sweep file's stem)"),
    "output": (str, "the folder of the results, relative to the current folder (default results/sweeps/NAME)"),
    "repetitions": (int, "runs of every point, each with its own seed (default 1)"),
    "seeds": (str, '"per_point" (default) or "shared"'),
}
TABLES = ("sweep", "base", "set", "grid", "zip")
SEED_MODES = ("per_point", "shared")
SEED_KEY = "run.seed"
ID_LENGTH = 12
MAX_POINTS = 100_000
# Scenario keys a sweep may not set, and why.
UNSWEPT = {"run.threads": "the threads of each point are set with meshsim sweep --threads N (results do not "
                          "depend on them)"}

# Columns of the summary table that describe the point rather than its result.
INFO_FIRST = ("point_id", "repetition", "seed")
INFO_LAST = ("status", "run_seconds", "path", "error", "traceback")


@dataclass(frozen=True)
class Point:
    """One run of a sweep: everything a worker needs, picklable, no open files.

    id: the stable point id, a hash of the resolved overrides (seed included).
    params: the swept (key, value) pairs ([grid] and [zip]) as resolved, in the sweep's key order.
    overrides: every (key, value) applied to the base: [set], then the swept values, then run.seed.
    base_text / base_path: the base scenario's text, and the absolute path that anchors a relative
        trace file wherever the worker started (the sweep file's, for an inline base).
    output: the absolute path of the point's result file.
    resolved: the point's fully resolved scenario as TOML; a worker refuses to run a point that it
        resolves differently (another meshsim version), and a rerun reruns a file that holds another.
    """

    id: str
    index: int
    repetition: int
    seed: int
    params: tuple
    overrides: tuple
    base_text: str
    base_path: str | None
    output: str
    resolved: str
    threads: int = 1


@dataclass
class Sweep:
    """A validated sweep file: its points in order (grid, then zip rows, then repetitions)."""

    path: str
    name: str
    text: str
    output: Path
    keys: list
    points: list
    repetitions: int
    seeds: str
    shape: dict = field(default_factory=dict)

    @property
    def summary_csv(self) -> Path:
        return self.output / "summary.csv"

    @property
    def summary_h5(self) -> Path:
        return self.output / "summary.h5"


class SweepInterrupted(Exception):
    """Ctrl-C or SIGTERM stopped the sweep, or (with `why`) the cluster stopped running it; every
    finished point is kept and listed in the summary."""

    def __init__(self, sweep: Sweep, n_done: int, why: str = ""):
        self.sweep = sweep
        self.why = why
        super().__init__(f"{why or 'interrupted'}: {n_done} of {len(sweep.points)} points complete; the summary "
                         f"is {sweep.summary_csv}; run the sweep again to finish it")


# ---------------------------------------------------------------------------------------------
# Reading and validating


def load_sweep(path, output=None, threads: int = 1) -> Sweep:
    """Read and validate a sweep file and every one of its points (DESIGN.md section 7).

    output: the results folder, overriding the file's `sweep.output`. threads: Numba threads per
    point. Raises InputError with every problem found, each naming the file, the key and what is
    allowed, before anything runs or is written.
    """
    from .scenario import _closest, _read_text, _toml_repr, load_scenario

    where = str(path)
    try:
        text = _read_text(path, where).replace("\r\n", "\n")
    except InputError as e:
        raise InputError([m.replace("scenario file", "sweep file") for m in e.problems]) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{where}: invalid TOML: {e}") from None
    problems = []
    for table in raw:
        if table not in TABLES:
            near = _closest(table, TABLES)
            hint = f" (did you mean [{near}]?)" if near else ""
            problems.append(f"{where}: [{table}]: unknown table{hint}; allowed: {', '.join(f'[{t}]' for t in TABLES)}")
        elif not isinstance(raw[table], dict):
            problems.append(f"{where}: {table} = {_toml_repr(raw[table])}: must be a table, written [{table}]")
    meta = raw.get("sweep", {}) if isinstance(raw.get("sweep"), dict) else {}
    for key, value in meta.items():
        if key not in SWEEP_KEYS:
            near = _closest(key, SWEEP_KEYS)
            hint = f" (did you mean sweep.{near}?)" if near else ""
            problems.append(f"{where}: sweep.{key}: unknown key{hint}; allowed: {', '.join(SWEEP_KEYS)}")
        elif not isinstance(value, SWEEP_KEYS[key][0]) or isinstance(value, bool):
            problems.append(f"{where}: sweep.{key} = {_toml_repr(value)}: must be "
                            f"{'an integer' if SWEEP_KEYS[key][0] is int else 'a string'}: {SWEEP_KEYS[key][1]}")
    repetitions = meta.get("repetitions", 1)
    if not isinstance(repetitions, int) or isinstance(repetitions, bool):
        repetitions = 1  # reported above
    elif not 1 <= repetitions <= 10_000:
        problems.append(f"{where}: sweep.repetitions = {repetitions}: must be an integer in [1, 10000]")
        repetitions = 1
    seeds = meta.get("seeds", "per_point")
    if isinstance(seeds, str) and seeds not in SEED_MODES:
        problems.append(f"{where}: sweep.seeds = {_toml_repr(seeds)}: must be one of "
                        f"{', '.join(repr(s) for s in SEED_MODES)}")
    name = meta.get("name", Path(where).stem)
    if isinstance(name, str) and (not name.strip() or "/" in name or "\0" in name or name in (".", "..")):
        problems.append(f"{where}: sweep.name = {_toml_repr(name)}: must be a non-empty name without '/'")
    folder, folder_key = (str(output), "-o") if output is not None else (meta.get("output"), "sweep.output")
    if not isinstance(folder, (str, type(None))):
        folder = None  # reported above
    elif folder is None and isinstance(name, str):
        folder = f"results/sweeps/{name}"
    if isinstance(folder, str) and (not folder.strip() or "\0" in folder):
        problems.append(f"{where}: {folder_key} = {_toml_repr(folder)}: must name a folder, such as "
                        "results/sweeps/NAME")
        folder = None

    # The base scenario: a file, or an inline [base] table; exactly one. Points carry its absolute
    # path, so that a worker started in another folder finds a relative trace file; messages name
    # it as written.
    base_text, base_path, base_label = None, None, None
    if "base" in meta and "base" in raw:
        problems.append(f"{where}: sweep.base and [base]: give the base scenario once, as a file or inline")
    elif isinstance(meta.get("base"), str):
        base_label = str(Path(where).parent / meta["base"])
        base_path = str(Path(base_label).absolute())
        try:
            base_text = _read_text(base_label, f"{where}: sweep.base = {_toml_repr(meta['base'])}")
        except InputError as e:
            problems.extend(e.problems)
    elif isinstance(raw.get("base"), dict):
        base_text, base_path, base_label = tomli_w.dumps(raw["base"]), str(Path(where).absolute()), f"{where} [base]"
    elif "base" not in meta:
        problems.append(f"{where}: no base scenario: give sweep.base = \"FILE.toml\" or an inline [base] table")

    fixed = _override_table(raw, "set", where, problems, lists=False)
    grid = _override_table(raw, "grid", where, problems, lists=True)
    zipped = _override_table(raw, "zip", where, problems, lists=True)
    lengths = {len(v) for v in zipped.values()}
    if len(lengths) > 1:
        problems.append(f"{where}: [zip]: every list must have the same length; the lengths are "
                        + ", ".join(f"{k} {len(v)}" for k, v in zipped.items()))
        zipped = {}
    seen = {}
    for table, keys in (("set", fixed), ("grid", grid), ("zip", zipped)):
        for key in keys:
            if key in seen:
                problems.append(f"{where}: {key}: is in both [{seen[key]}] and [{table}]; give each key once")
            seen.setdefault(key, table)
    swept = [*grid, *zipped]
    seed_given = SEED_KEY in seen
    if seed_given and repetitions > 1:
        problems.append(f"{where}: sweep.repetitions = {repetitions}: {SEED_KEY} is given in [{seen[SEED_KEY]}], so "
                        "every repetition would be the same run; leave repetitions at 1 or let the sweep derive "
                        "the seeds")
        repetitions = 1
    if seed_given and "seeds" in meta:
        problems.append(f"{where}: sweep.seeds = {_toml_repr(seeds)}: applies only when the sweep derives the "
                        f"seeds; {SEED_KEY} is given in [{seen[SEED_KEY]}]")
    n_points = math.prod(len(v) for v in grid.values()) * (min(lengths) if zipped else 1) * repetitions
    if n_points > MAX_POINTS:
        problems.append(f"{where}: {n_points:,} points: at most {MAX_POINTS:,} in one sweep; split it into "
                        "several sweep files")
        grid, zipped = {}, {}
    if base_text is None:
        raise InputError(problems)

    # The base with [set], then every point, validated as scenarios; each problem is reported once
    # however many points share it, and one that only a point's values cause names the point.
    try:
        base = load_scenario(base_label, list(fixed.items()), text=base_text)
        base_seed, base_problems = base.get("run", "seed"), set()
    except InputError as e:
        base_seed, base_problems = 0, set(e.problems)
        problems.extend(_in_sweep(m, where, seen) for m in e.problems)
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    rows = [dict(zip(zipped, values, strict=True)) for values in zip(*zipped.values(), strict=True)] or [{}]
    out_dir = Path(folder).expanduser().resolve() if folder is not None else None
    points, ids = [], {}
    for combo in combos:
        for row in rows:
            swept_values = {**combo, **row}
            label = ", ".join(f"{k}={_toml_repr(v)}" for k, v in swept_values.items()) or "the base scenario"
            for rep in range(repetitions):
                given = [*fixed.items(), *swept_values.items()]
                try:
                    sc = load_scenario(base_label, given, text=base_text)
                except InputError as e:
                    problems.extend(_in_sweep(m, where, seen) if m.startswith("override ") else
                                    f"{where}: at the point {label}: {m}" for m in e.problems
                                    if m not in base_problems)
                    break  # the other repetitions have the same problems
                params = tuple((k, _resolved(sc, k)) for k in swept)
                if seed_given:
                    seed = sc.get("run", "seed")
                else:
                    seed = derive_seed(base_seed, params, rep, seeds)
                    sc = load_scenario(base_label, [*given, (SEED_KEY, seed)], text=base_text)
                resolved_overrides = tuple((k, _resolved(sc, k)) for k, _ in given)
                if not seed_given:
                    resolved_overrides += ((SEED_KEY, seed),)
                pid = point_id(resolved_overrides)
                if pid in ids:
                    problems.append(f"{where}: the points {ids[pid]} and {label} (repetition {rep}) are the same run; "
                                    "remove the repeated values")
                    continue
                ids[pid] = f"{label} (repetition {rep})"
                if out_dir is not None:
                    points.append(Point(id=pid, index=len(points), repetition=rep, seed=seed, params=params,
                                        overrides=resolved_overrides, base_text=base_text, base_path=base_path,
                                        output=str(out_dir / "points" / f"{pid}.h5"), resolved=sc.resolved_toml(),
                                        threads=threads))
    if out_dir is not None:
        wrong = _output_folder_problem(out_dir)
        if wrong:
            problems.append(f"{where}: {folder_key} = {_toml_repr(folder)}: {wrong}")
    if problems:
        raise InputError(list(dict.fromkeys(problems)))
    return Sweep(path=where, name=name, text=text, output=out_dir, keys=swept, points=points,
                 repetitions=repetitions, seeds=seeds,
                 shape={"grid": [len(v) for v in grid.values()], "zip": len(rows) if zipped else 0})


def _override_table(raw, table, where, problems, lists: bool) -> dict:
    """The `section.key` -> values of a [set], [grid] or [zip] table. Keys may be written dotted
    (`migration.threshold = [...]`, read by TOML as a nested table) or quoted ("migration.threshold")."""
    from .params import PARAMS, sections
    from .scenario import _toml_repr, _unknown_key, _unknown_section

    content = raw.get(table, {})
    if not isinstance(content, dict):
        return {}
    flat = {}
    for k, v in content.items():
        pairs = [(f"{k}.{k2}", v2) for k2, v2 in v.items()] if isinstance(v, dict) and "." not in k else [(k, v)]
        for key, value in pairs:
            if key in flat:
                problems.append(f"{where}: [{table}] {key}: given twice (quoted and dotted); give it once")
            flat[key] = value
    known = {p.path for p in PARAMS}
    out = {}
    for key, values in flat.items():
        section, _, name = key.partition(".")
        if key not in known:
            why = _unknown_section(section) if section not in sections() else _unknown_key(section, name)
            problems.append(f"{where}: [{table}] {key}: {why}")
            continue
        if key in UNSWEPT:
            problems.append(f"{where}: [{table}] {key}: {UNSWEPT[key]}")
            continue
        if lists and (not isinstance(values, list) or not values):
            problems.append(f"{where}: [{table}] {key} = {_toml_repr(values)}: must be a non-empty list of the "
                            f"values to run, e.g. {key} = [1, 2]")
            continue
        out[key] = values
    return out


def _in_sweep(message: str, where: str, tables: dict) -> str:
    """A scenario problem restated for the sweep file: `override KEY=V: ...` names its table."""
    if message.startswith("override "):
        shown = message[len("override "):]
        key = shown.partition("=")[0]
        at = shown.find(f": {key} = ")  # the usual "KEY = VALUE: what is allowed": say the key once
        return f"{where}: [{tables.get(key, 'set')}] {shown[at + 2:] if at >= 0 else shown}"
    return message


def _resolved(scenario, key: str):
    section, _, name = key.partition(".")
    return scenario.get(section, name)


def _output_folder_problem(out: Path) -> str | None:
    """Why no results can be written in `out`, or None."""
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                return f"{p} is a file, not a folder"
            if not os.access(p, os.W_OK | os.X_OK):
                return f"cannot write in {p} (permission denied)"
            return None
    return None


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def point_id(overrides) -> str:
    """The stable id of a point: the first 12 hex digits of SHA-256 over its resolved overrides
    (key order does not matter; 2 and 2.0 for a float key are the same value once resolved)."""
    return hashlib.sha256(_canonical(sorted([k, v] for k, v in overrides)).encode()).hexdigest()[:ID_LENGTH]


def derive_seed(base_seed: int, params, repetition: int, mode: str = "per_point") -> int:
    """A point's seed (DESIGN.md section 7). "per_point": from SHA-256 over the base seed, the swept
    values and the repetition, so every run of the sweep draws its own numbers; "shared": the base
    seed plus the repetition, so all points of a repetition see the same draws (paired comparisons)."""
    if mode == "shared":
        return (base_seed + repetition) % 2**63
    digest = hashlib.sha256(_canonical([base_seed, sorted([k, v] for k, v in params), repetition]).encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


# ---------------------------------------------------------------------------------------------
# Running one point


def point_status(point: Point) -> str:
    """"complete", "stale" (complete, but of another scenario), "incomplete" or "new"."""
    import h5py

    from .output import incomplete_path

    final = Path(point.output)
    if final.exists():
        try:
            with h5py.File(final, "r") as f:
                complete = bool(f.attrs.get("complete", False))
                resolved = f.attrs.get("scenario_resolved", "")
        except OSError:
            return "incomplete"
        if not complete:
            return "incomplete"
        return "complete" if resolved == point.resolved else "stale"
    return "incomplete" if incomplete_path(final).exists() else "new"


def row_of_file(path) -> dict:
    """The summary row of a complete point file: every scalar of its /summary group."""
    from .report import read_summary

    _, summary = read_summary(path)
    return {k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))}


def _done_row(point: Point) -> dict | None:
    """The "done" row of a point whose file is complete and holds its scenario, read from the file;
    None if it has no such file (or one without a summary: it runs again)."""
    if point_status(point) != "complete":
        return None
    try:
        return {"point_id": point.id, "status": "done", "path": point.output, **row_of_file(point.output)}
    except InputError:
        return None


# Stop requests in a worker process: every run (Ctrl-C reached the worker of a cluster this process
# started), or the runs of one sweep (its client asked, by token). Read between kernel calls.
_STOP = {"all": False, "tokens": set()}
# Points of each sweep token running in this process, so that a stopping sweep can wait for them to
# close their files before it shuts its cluster down.
_RUNNING = collections.Counter()


def _request_stop(token: str) -> None:
    _STOP["tokens"].add(token)


def _running(token: str) -> int:
    return _RUNNING[token]


def run_point(point: Point, token: str | None = None, also_stop=None) -> dict:
    """Run one point and write its result file; return its summary row (DESIGN.md section 7).

    Pure: the same point gives the same file wherever it runs. A point that raises is returned as a
    row with status "failed", its error and its traceback, so that the sweep goes on; Ctrl-C, and a
    stop asked for the sweep `token`, end the run at its next kernel-call boundary with an
    incomplete file, and are passed up (RunInterrupted); so does `also_stop()` returning True (the
    serial path's own signal flag).
    """
    from .engine import RunInterrupted, run_scenario
    from .scenario import load_scenario

    row = {"point_id": point.id, "status": "failed", "path": point.output}

    def stop():
        return _STOP["all"] or token in _STOP["tokens"] or (also_stop is not None and also_stop())

    if stop():  # queued before the sweep stopped: leave no file behind
        return {"point_id": point.id, "status": "not run", "path": point.output}
    _RUNNING[token] += 1
    try:
        sc = load_scenario(point.base_path, list(point.overrides), text=point.base_text)
        if sc.resolved_toml() != point.resolved:
            raise InputError(f"point {point.id}: this meshsim ({__version__}) resolves the point differently from "
                             "the one that read the sweep; run the same meshsim version everywhere")
        t0 = time.perf_counter()
        run_scenario(sc, point.output, threads=point.threads, progress=False, stop=stop)
        row["run_seconds"] = time.perf_counter() - t0
        row.update(row_of_file(point.output))
        row["status"] = "done"
    except (KeyboardInterrupt, RunInterrupted):
        raise
    except InputError as e:
        row.update(error="; ".join(e.problems), traceback="")
    except Exception as e:  # a bug or a resource failure in one point must not stop the others
        row.update(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
    finally:
        _RUNNING[token] -= 1
    return row


def _row_after_failure(point: Point, error: BaseException) -> dict:
    """The row of a point whose task itself failed (its worker died every time it ran it): what its
    file says if the point got as far as completing it, else failed with Dask's error."""
    return _done_row(point) or {"point_id": point.id, "status": "failed", "path": point.output,
            "error": f"{type(error).__name__}: {error}",
            "traceback": "".join(traceback.format_exception(error))}


class _ClusterLost(Exception):
    """The Dask cluster stopped running the sweep's points (its scheduler went away)."""


# ---------------------------------------------------------------------------------------------
# Running a sweep


@dataclass
class SweepResult:
    """What a sweep did: a row per point (by id), and counts and times for the closing line."""

    sweep: Sweep
    rows: dict
    skipped: int
    ran: int
    failed: int
    wall_seconds: float
    workers: int  # worker threads: points that can run at once

    @property
    def run_seconds(self) -> float:
        return sum(r.get("run_seconds", 0.0) for r in self.rows.values() if r.get("_ran"))

    @property
    def overhead_per_point(self) -> float:
        """Seconds per point beyond the runs themselves: (wall x worker threads - run time) / points run.
        Scheduling, worker start-up, reading the scenario and writing the row all count."""
        if not self.ran:
            return 0.0
        return (self.wall_seconds * max(self.workers, 1) - self.run_seconds) / self.ran


def run_sweep(sweep: Sweep, *, client=None, connect=None, progress: bool | None = None, on_row=None) -> SweepResult:
    """Run every point that is not complete and write the summary table (DESIGN.md section 7).

    client: a `distributed.Client` to run the points on; connect: instead, a callable returning a
    context manager that yields one (such as `dask_client`), entered only if a point needs running;
    with neither, the points run one after another in this process. on_row(point, row) is
    called as each point finishes. Complete points whose file holds the same scenario are skipped
    and their rows read from their files. Ctrl-C cancels what is queued or running, writes the
    summary of what finished, and raises SweepInterrupted.
    """
    from .engine import StopSignals

    t0 = time.perf_counter()
    # Ctrl-C and SIGTERM only ask the sweep to stop; it stops where it checks (between points, and
    # while it waits for the cluster), never inside Dask's or h5py's own code. A second signal stops
    # at once.
    with _FolderLock(sweep), StopSignals() as signals:
        return _run_sweep(sweep, client, connect, progress, on_row, t0, signals)


def _run_sweep(sweep, client, connect, progress, on_row, t0, signals) -> SweepResult:
    import sys

    from tqdm import tqdm

    from .engine import RunInterrupted

    def check():
        if signals.requested:
            raise KeyboardInterrupt

    rows = {p.id: _done_row(p) or {"point_id": p.id, "status": "not run", "path": p.output} for p in sweep.points}
    todo = [p for p in sweep.points if rows[p.id]["status"] != "done"]
    skipped = len(sweep.points) - len(todo)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = tqdm(total=len(sweep.points), initial=skipped, unit="point", disable=not progress, file=sys.stderr,
               dynamic_ncols=True, desc=sweep.name)
    state = {"written": 0.0, "dirty": False, "workers": 1, "counted": 0.0}

    def flush(now=False):
        # The CSV follows the points at most a second behind, without rewriting it for every row;
        # the HDF5 table, some 50 ms to write, is written at the end.
        if state["dirty"] and (now or time.perf_counter() - state["written"] > 1.0):
            write_summary(sweep, rows, hdf5=False)
            state.update(written=time.perf_counter(), dirty=False)

    def record(point, row):
        row["_ran"] = True
        rows[point.id] = row
        state["dirty"] = True
        bar.update(1)
        if on_row is not None:
            on_row(point, row)
        flush()

    def idle(c):
        check()
        if time.perf_counter() - state["counted"] > 2.0:  # asking the scheduler costs a round trip
            workers = c.scheduler_info().get("workers", {}).values()
            state["workers"] = max(state["workers"], sum(w.get("nthreads", 1) for w in workers))
            state["counted"] = time.perf_counter()
        flush()

    def on(c):
        idle(c)
        _run_on(c, todo, record, idle)
        state["counted"] = 0.0
        idle(c)

    try:
        if client is not None:
            on(client)
        elif connect is not None and todo:
            with connect() as c:
                on(c)
        else:
            for p in todo:
                check()
                record(p, run_point(p, also_stop=lambda: signals.requested))
                flush(now=True)  # the next point may be long
        check()
    except (KeyboardInterrupt, RunInterrupted, _ClusterLost) as e:
        _keep_partial(rows, sweep)
        write_summary(sweep, rows)
        why = str(e) if isinstance(e, _ClusterLost) else ""
        raise SweepInterrupted(sweep, sum(r["status"] == "done" for r in rows.values()), why) from e
    except InputError:  # e.g. no scheduler to connect to: nothing ran, nothing to write
        raise
    except BaseException:  # a bug, or a disk that filled: keep what is known, then let it show
        try:
            _keep_partial(rows, sweep)
            write_summary(sweep, rows)
        except Exception:
            pass
        raise
    finally:
        bar.close()
    write_summary(sweep, rows)
    ran = [r for r in rows.values() if r.get("_ran")]
    return SweepResult(sweep=sweep, rows=rows, skipped=skipped, ran=len(ran),
                       failed=sum(r["status"] == "failed" for r in ran), wall_seconds=time.perf_counter() - t0,
                       workers=state["workers"])


class _FolderLock:
    """One sweep at a time in a results folder: an exclusive lock on FOLDER/.lock while it runs, and
    a folder whose table belongs to another sweep file is refused (their tables would overwrite
    each other)."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep
        self.fh = None

    def __enter__(self):
        import fcntl

        import h5py

        out = self.sweep.output
        self.created = [p for p in (out, *out.parents) if not p.exists()]
        self.new_lock = not (out / ".lock").exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
            self.fh = open(out / ".lock", "a")
        except OSError as e:
            raise InputError(f"{out}: cannot write the sweep's results there ({e.strerror or e})") from None
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise InputError(f"{out}: another meshsim sweep is running in this folder; wait for it, or give this "
                             "one another folder with -o or sweep.output") from None
        except OSError:  # a filesystem without locks: go on unguarded
            pass
        mine = str(Path(self.sweep.path).resolve())
        try:
            with h5py.File(self.sweep.summary_h5, "r") as f:
                other = f.attrs.get("sweep_path", mine)
        except OSError:  # no table yet, or not one of ours
            other = mine
        if other != mine:
            self.__exit__(InputError)
            raise InputError(f"{out}: holds the results of the sweep {other}; give this one another folder with -o "
                             "or sweep.output")
        return self

    def __exit__(self, exc_type=None, exc=None, tb=None):
        if self.fh is not None:
            self.fh.close()  # releases the lock
            self.fh = None
            if exc_type is InputError and self.new_lock:  # e.g. no scheduler to connect to: leave nothing
                try:
                    os.remove(self.sweep.output / ".lock")
                    for p in self.created:
                        p.rmdir()
                except OSError:  # something was written after all
                    pass
        return False


def _keep_partial(rows: dict, sweep: Sweep) -> None:
    """After Ctrl-C, the rows of the points that did not report: complete if their file is (a
    worker may finish its point as the sweep stops), interrupted if they left an incomplete file."""
    from .output import incomplete_path

    for p in sweep.points:
        r = rows[p.id]
        if r["status"] != "not run":
            continue
        done = _done_row(p)
        if done is not None:
            r.update(done)
        elif incomplete_path(Path(p.output)).exists():
            r.update(status="interrupted", path=str(incomplete_path(Path(p.output))))


def _run_on(client, todo, record, idle) -> None:
    """Submit every point to the Dask cluster and record each as it finishes (idle(client) is called
    while none does). A worker that dies is replaced by its nanny and its point rescheduled by Dask;
    a point that kills its worker every time (distributed.scheduler.allowed-failures) is recorded as
    failed."""
    import uuid

    from distributed import as_completed
    from distributed.client import FutureCancelledError

    from .engine import RunInterrupted

    token = uuid.uuid4().hex[:8]
    futures = {client.submit(run_point, p, token, key=f"meshsim-point-{p.id}-{token}", pure=False): p for p in todo}
    try:
        done = as_completed(futures)
        while not done.is_empty():
            if not done.has_ready():
                idle(client)
                time.sleep(0.1)
                continue
            fut = next(done)
            p = futures[fut]
            try:
                row = fut.result()
            except RunInterrupted:  # Ctrl-C reached the workers first: the sweep is being stopped
                raise KeyboardInterrupt from None
            except FutureCancelledError as e:  # the scheduler went away, or cancelled the points
                raise _ClusterLost(f"the Dask cluster stopped running the points ({' '.join(str(e).split())})") \
                    from None
            except Exception as e:  # distributed.KilledWorker, or a worker that cannot import meshsim
                row = _row_after_failure(p, e)
            fut.release()
            record(p, row)
    except BaseException:
        # The points already running stop at their next kernel-call boundary and close their files
        # (marked incomplete) before the cluster goes: a worker killed mid-write could leave its
        # file locked. Queued points are dropped.
        try:
            client.run(_request_stop, token)
            client.cancel(list(futures), force=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(client.run(_running, token).values()):
                time.sleep(0.1)
        except Exception:  # a worker that is going away has nothing left to stop
            pass
        raise


# ---------------------------------------------------------------------------------------------
# Where the points run


@contextlib.contextmanager
def dask_client(*, scheduler: str | None = None, scheduler_file: str | None = None, cluster: str | None = None,
                workers: int | None = None, dashboard: bool = False, queue: str | None = None,
                account: str | None = None, walltime: str | None = None, cores: int | None = None,
                memory: str | None = None, jobs: int = 1, threads: int = 1, insecure: bool = False,
                shared_dir=None):
    """A `distributed.Client` for a sweep, closed (with any cluster it started) on leaving.

    Default: an embedded LocalCluster on loopback with one single-threaded worker process per
    `threads` cores (`workers` to change it) and no dashboard unless `dashboard`. `scheduler`
    (tls://HOST:PORT, with the certificates of the user's Dask configuration) or `scheduler_file`
    joins a running cluster; an unencrypted address of another machine is refused unless
    `insecure`. `cluster` = "slurm" or "pbs" starts `jobs` batch jobs through dask-jobqueue, each
    with one single-threaded worker process per `threads` of its `cores`; queue, account, walltime
    and memory go to the job script (unset ones come from dask-jobqueue's configuration). Its
    scheduler and workers talk TLS (docs/sweeps.md, "Security") unless `insecure`; the workers'
    copies of a temporary authority's certificate and key are written in `shared_dir` (default:
    the current folder), which they must see at the same path, unless dask-jobqueue's
    configuration names a shared-temp-directory. `threads` is the Numba threads of each point.
    Workers find Numba's compiled kernels in the on-disk cache beside the package, or in
    NUMBA_CACHE_DIR, which the job scripts export when it is set here.
    """
    import logging

    from distributed import Client

    if scheduler is not None or scheduler_file is not None:
        if scheduler_file is not None and not Path(scheduler_file).is_file():
            raise InputError(f"--scheduler-file {scheduler_file}: no such file (the scheduler writes it when it "
                             "starts: dask scheduler --scheduler-file FILE)")
        what = f"--scheduler {scheduler}" if scheduler is not None else f"--scheduler-file {scheduler_file}"
        address = scheduler if scheduler is not None else _scheduler_file_address(scheduler_file)
        if address is not None:
            _check_scheduler_address(address, what if scheduler is not None else f"{what} ({address})", insecure)
        try:
            client = Client(scheduler, scheduler_file=scheduler_file, timeout="20s")
        except Exception as e:  # refused, timed out, or a scheduler file that is not one
            raise InputError(f"{what}: cannot connect to the Dask scheduler ({type(e).__name__}: {e})") from None
        with client:
            _check_worker_versions(client, what)
            if not client.scheduler_info().get("workers"):
                import sys

                print(f"meshsim: {what}: the cluster has no workers yet; the points start as workers join",
                      file=sys.stderr)
            yield client
        return
    if dashboard:
        import importlib.util

        if importlib.util.find_spec("bokeh") is None:
            raise InputError("--dashboard: Dask's dashboard needs bokeh; install it with pip install bokeh")
    import dask

    # Points are long: in a sweep of more than twice as many points as workers, the scheduler keeps
    # the points waiting to itself and hands a worker its next one only when it is free (Dask's
    # queuing), rather than lining them up behind a slow point or on a worker that may die.
    # The points are long and few: Dask's statistical profiler (a sample every 10 ms in every
    # worker), its 50 Hz event-loop tick and its 10 Hz memory and system monitors only take CPU from
    # the points on a small machine. Memory limits are still enforced, within a second.
    one_each = dask.config.set({"distributed.scheduler.worker-saturation": 1.0,
                                "distributed.worker.profile.enabled": False,
                                "distributed.admin.tick.interval": "500ms",
                                "distributed.admin.system-monitor.interval": "2s",
                                "distributed.worker.memory.monitor-interval": "1s"})
    if cluster is not None:
        with one_each, _jobqueue_cluster(cluster, queue=queue, account=account, walltime=walltime, cores=cores,
                                         memory=memory, dashboard=dashboard, threads=threads, insecure=insecure,
                                         shared_dir=shared_dir) as jc:
            try:
                jc.scale(jobs=jobs)
                with Client(jc) as client:  # with the cluster's own security
                    import sys

                    print(f"meshsim: {jobs} {cluster} job(s) submitted; the points start as their workers join",
                          file=sys.stderr)
                    yield client
            finally:
                _remove_certificate_files(jc)
        return
    from distributed import LocalCluster

    n = workers or max(1, host_cores() // threads)
    # Without --dashboard the scheduler's HTTP server (health checks only) takes any free loopback port.
    with one_each, LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address="127.0.0.1:8787" if dashboard else "127.0.0.1:0",
                                scheduler_kwargs={"dashboard": dashboard},
                                # The sweep reports every point's failure itself; Dask's own
                                # messages (a heartbeat cut short as the cluster closes) are noise.
                                silence_logs=logging.CRITICAL) as lc:
        with Client(lc) as client:
            client.register_plugin(StopOnInterrupt(), name="meshsim-stop-on-interrupt")
            if dashboard:
                import sys

                print(f"dashboard: {client.dashboard_link}", file=sys.stderr)
            yield client


class StopOnInterrupt(WorkerPlugin):
    """A Dask worker plugin for the workers of a cluster this process starts: Ctrl-C on a terminal
    reaches every process of the group; a worker then stops its run at the next kernel-call boundary
    (keeping an incomplete file) instead of dying, and the sweep shuts the cluster down. Set up again
    on every worker the nanny restarts."""

    def setup(self, worker):
        import signal

        signal.signal(signal.SIGINT, _stop_all)


def _stop_all(signum, frame) -> None:
    _STOP["all"] = True


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _worker_version() -> str:
    from meshsim import __version__ as v

    return v


def _check_worker_versions(client, what: str) -> None:
    """Every worker must run this meshsim: another version could resolve or run a point differently."""
    try:
        versions = client.run(_worker_version)
    except Exception as e:  # a worker without meshsim cannot even import the function
        raise InputError(f"{what}: the workers cannot run meshsim ({type(e).__name__}: {e}); install this meshsim "
                         f"({__version__}) in the workers' environment") from None
    other = {addr: v for addr, v in versions.items() if v != __version__}
    if other:
        raise InputError(f"{what}: workers run another meshsim version ({', '.join(sorted(set(other.values())))}); "
                         f"this one is {__version__}")


def _scheduler_file_address(path) -> str | None:
    """The address in a scheduler file, or None if it has none (connecting then says what is wrong)."""
    try:
        address = json.loads(Path(path).read_text()).get("address")
    except (OSError, ValueError, AttributeError):
        return None
    return address if isinstance(address, str) else None


def _is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1; a name is never looked up."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_scheduler_address(address: str, what: str, insecure: bool) -> None:
    """Refuse, before connecting, an unencrypted scheduler on another machine (unless `insecure`):
    whoever reaches its port can submit code to run as this user on its workers. A tls:// (or
    wss://) scheduler needs this side's certificates in the user's Dask configuration."""
    import dask
    from distributed import Security
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address, strict=False)
        host = parse_host_port(loc, 8786)[0] if scheme != "inproc" else "localhost"
    except ValueError:  # connecting says what is wrong with it
        return
    if scheme in ("tls", "wss"):
        sec = Security()
        if not (sec.tls_ca_file and sec.tls_client_cert) and not dask.config.get(
                "distributed.client.security-loader", None):
            raise InputError(f"{what}: a {scheme}:// scheduler needs your certificates in Dask's configuration "
                             "(distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and .key)")
        return
    if not insecure and not _is_loopback(host):
        raise InputError(f"{what}: refused: {scheme}:// is unencrypted and unauthenticated, and anyone who can reach "
                         "that port can run code as you on its workers; use a tls:// scheduler (certificates in your "
                         "Dask configuration), or give --insecure to connect anyway")


def _cluster_security(kind: str):
    """The TLS settings of a batch cluster: the certificates named in the user's Dask configuration
    (distributed.comm.tls.*), else a temporary certificate authority made for this cluster alone."""
    from distributed import Security

    sec = Security()
    named = {"distributed.comm.tls.ca-file": sec.tls_ca_file,
             "distributed.comm.tls.scheduler.cert": sec.tls_scheduler_cert,
             "distributed.comm.tls.worker.cert": sec.tls_worker_cert,
             "distributed.comm.tls.client.cert": sec.tls_client_cert}
    if any(named.values()):
        missing = [k for k, v in named.items() if not v]
        if missing:
            raise InputError(f"--cluster {kind}: your Dask configuration names TLS certificates but not "
                             f"{', '.join(missing)}; name all four (or none, for a temporary authority)")
        return sec
    try:
        return Security.temporary()
    except ImportError:
        raise InputError(f"--cluster {kind}: TLS with a temporary certificate authority needs cryptography; install "
                         "it with pip install 'meshsim[cluster]' (or name certificates in your Dask configuration, or "
                         "give --insecure)") from None


def _remove_certificate_files(jc) -> None:
    """Delete the files of a temporary authority's certificate and key that dask-jobqueue wrote for
    the workers: it keeps them open as temporary files (deleted on closing) in _job_<key>, and
    would otherwise delete them only when the cluster object is collected."""
    for key in ("ca_file", "cert", "key"):
        f = getattr(jc, f"_job_{key}", None)
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def _jobqueue_cluster(kind: str, *, queue, account, walltime, cores, memory, dashboard, threads: int = 1,
                      insecure: bool = False, shared_dir=None):
    """A dask-jobqueue cluster of `kind` (slurm or pbs), not yet scaled: each job runs one
    single-threaded worker process per `threads` of its cores (given, or from the configuration).

    Unless `insecure`, its scheduler listens on tls:// and the job script carries the workers'
    --tls-ca-file, --tls-cert and --tls-key: the configuration's certificates, or the files
    dask-jobqueue writes (readable by this user only) of a temporary authority, in its configured
    shared-temp-directory or else in `shared_dir` (default: the current folder)."""
    import shlex
    import sys

    import dask

    try:
        import dask_jobqueue
    except ImportError:
        raise InputError(f"--cluster {kind}: needs dask-jobqueue; install it with pip install 'meshsim[cluster]'") \
            from None
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
    job_cores = cores if cores is not None else dask.config.get(f"jobqueue.{kind}.cores", None)
    prologue = [f"export NUMBA_NUM_THREADS={threads}"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        prologue.append(f"export NUMBA_CACHE_DIR={shlex.quote(os.environ['NUMBA_CACHE_DIR'])}")
    kw = dict(queue=queue, account=account, walltime=walltime, cores=cores, memory=memory, python=sys.executable,
              job_script_prologue=prologue,
              scheduler_options={"dashboard": dashboard, "dashboard_address": ":8787" if dashboard else ":0"},
              job_name="meshsim")
    if job_cores:
        # One worker process per `threads` cores, each running one point at a time: dask-jobqueue
        # gives a worker cores / processes task threads, so it is told of one core per worker and
        # the job asks the batch system for them all.
        kw["processes"] = kw["cores"] = max(1, job_cores // threads)
        if threads > 1 and kind == "slurm":
            kw["job_cpu"] = job_cores
        elif threads > 1:
            from dask.utils import parse_bytes
            from dask_jobqueue.pbs import pbs_format_bytes_ceil

            job_memory = memory if memory is not None else dask.config.get("jobqueue.pbs.memory", None)
            kw["resource_spec"] = f"select=1:ncpus={job_cores}" + (
                f":mem={pbs_format_bytes_ceil(parse_bytes(job_memory))}" if job_memory else "")
    if not insecure:
        kw["security"] = _cluster_security(kind)
        temporary = "\n" in kw["security"].tls_ca_file  # in memory, not a file's path
        if temporary and dask.config.get(f"jobqueue.{kind}.shared-temp-directory", None) is None:
            folder = os.path.abspath(shared_dir if shared_dir is not None else os.getcwd())
            if shlex.quote(folder) != folder:  # dask-jobqueue writes the paths into the script unquoted
                raise InputError(f"--cluster {kind}: the workers' certificate files would go in {folder}, whose name "
                                 f"the job script cannot carry; set jobqueue.{kind}.shared-temp-directory in Dask's "
                                 "configuration to a folder the workers see, named without spaces or quotes")
            kw["shared_temp_directory"] = folder
    kw = {k: v for k, v in kw.items() if v is not None}
    try:
        return cls(**kw)
    except ValueError as e:  # e.g. no cores or memory given here or in the jobqueue configuration
        why = " ".join(str(e).split())
        if "cores" in why or "memory" in why:
            why += " (give --cores and --memory, or set them in dask-jobqueue's configuration)"
    except OSError as e:  # the certificate files could not be written
        why = f"cannot write the workers' certificate files ({' '.join(str(e).split())})"
    # Raised out here, so that nothing keeps the half-made cluster, and the certificate files it wrote, alive.
    raise InputError(f"--cluster {kind}: {why}")


# ---------------------------------------------------------------------------------------------
# The summary table


def table_columns(sweep: Sweep, rows: dict) -> list:
    """point_id, repetition, seed, the swept keys, status, the summary figures (the stable names of
    DESIGN.md section 5 first, then the rest as they first appear), run_seconds, path, error,
    traceback."""
    from .report import STABLE_SUMMARY_KEYS

    metrics = dict.fromkeys(k for k in STABLE_SUMMARY_KEYS if any(k in r for r in rows.values()))
    for r in rows.values():
        for k in r:
            if k not in INFO_FIRST and k not in INFO_LAST and not k.startswith("_") and k not in sweep.keys:
                metrics.setdefault(k, None)
    return [*INFO_FIRST, *sweep.keys, "status", *metrics, *INFO_LAST[1:]]


def table_rows(sweep: Sweep, rows: dict) -> list:
    """One dict per point, in the sweep's order, with the point's parameters filled in."""
    out = []
    for p in sweep.points:
        r = dict(rows.get(p.id, {"status": "not run", "path": p.output}))
        r.update(point_id=p.id, repetition=p.repetition, seed=p.seed, **dict(p.params))
        out.append(r)
    return out


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return json.dumps(v)
    return v


def write_summary(sweep: Sweep, rows: dict, hdf5: bool = True) -> tuple[Path, Path]:
    """Write summary.csv and (with `hdf5`) summary.h5 in the sweep's folder, each through a
    temporary name, so a reader never sees half a table. The HDF5 table has one dataset per column
    along `point`."""
    import h5py

    sweep.output.mkdir(parents=True, exist_ok=True)
    cols = table_columns(sweep, rows)
    table = table_rows(sweep, rows)
    tmp = sweep.summary_csv.with_name(".summary.csv.tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in table:
            w.writerow([_csv_value(r.get(c)) for c in cols])
    os.replace(tmp, sweep.summary_csv)
    if not hdf5:
        return sweep.summary_csv, sweep.summary_h5

    tmp = sweep.summary_h5.with_name(".summary.h5.tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs["meshsim_version"] = __version__
        f.attrs["sweep_name"] = sweep.name
        f.attrs["sweep_path"] = str(Path(sweep.path).resolve())
        f.attrs["sweep_text"] = sweep.text
        f.attrs["columns"] = cols
        f.attrs["parameters"] = list(sweep.keys)
        f.attrs["points"] = len(table)
        f.attrs["complete"] = sum(r.get("status") == "done" for r in table)
        f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        g = f.create_group("table")
        for c in cols:
            values = [r.get(c) for r in table]
            ds = g.create_dataset(c, data=_column_array(values))
            ds.attrs["role"] = ("parameter" if c in sweep.keys else "point" if c in INFO_FIRST or c in INFO_LAST
                                else "summary")
    os.replace(tmp, sweep.summary_h5)
    return sweep.summary_csv, sweep.summary_h5


def _column_array(values):
    """int64 if every point has an integer, bool if every point has a bool, float64 if every value
    is a number (NaN where a point has none: an integer column of a sweep with failed points is
    float64), else UTF-8 strings written as in the CSV ("" where missing, lists as JSON)."""
    present = [v for v in values if v is not None]
    complete = present and len(present) == len(values)
    if complete and all(isinstance(v, bool) for v in present):
        return np.array(values, np.bool_)
    if complete and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return np.array(values, np.int64)
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return np.array([math.nan if v is None else float(v) for v in values], np.float64)
    import h5py

    return np.array([str(_csv_value(v)) for v in values], dtype=h5py.string_dtype())


# ---------------------------------------------------------------------------------------------
# Listing


def format_points(sweep: Sweep, statuses=None) -> str:
    """The dry run: one line per point with its id, repetition, seed, values and status."""
    from .scenario import _toml_repr

    statuses = statuses or {p.id: point_status(p) for p in sweep.points}
    n_complete = sum(s == "complete" for s in statuses.values())
    shape = " x ".join(str(n) for n in sweep.shape["grid"]) or ""
    if sweep.shape["zip"]:
        shape = f"{shape} x {sweep.shape['zip']} zipped" if shape else f"{sweep.shape['zip']} zipped"
    if sweep.repetitions > 1:
        shape = f"{shape or '1'} x {sweep.repetitions} repetitions"
    head = [f"{sweep.path}: {len(sweep.points)} points" + (f" ({shape})" if shape else "")
            + f", seeds {sweep.seeds}; results in {sweep.output}; {n_complete} complete"]
    cols = ["#", "point_id", "rep", "seed", *sweep.keys, "status"]
    body = [[str(p.index), p.id, str(p.repetition), str(p.seed), *[_toml_repr(v) for _, v in p.params],
             statuses[p.id]] for p in sweep.points]
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(head + lines)


def format_result(res: SweepResult) -> str:
    """The closing lines of a sweep: counts, where the table is, time and overhead per point."""
    sw = res.sweep
    done = sum(r.get("status") == "done" for r in res.rows.values())
    lines = [f"{sw.name}: {done} of {len(sw.points)} points complete ({res.ran} run, {res.skipped} already "
             f"complete, {res.failed} failed)"]
    if res.ran:
        lines.append(f"{res.wall_seconds:.1f} s on {res.workers} worker thread(s); the runs took "
                     f"{res.run_seconds:.1f} s; overhead {res.overhead_per_point:.2f} s per point")
    for p in sw.points:
        r = res.rows[p.id]
        if r.get("status") == "failed" and r.get("_ran"):
            lines.append(f"failed {p.id} ({', '.join(f'{k}={v}' for k, v in p.params) or 'base'}): {r.get('error')}")
    lines.append(f"summary: {sw.summary_csv} and {sw.summary_h5}")
    return "\n".join(lines)

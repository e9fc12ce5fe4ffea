"""Running a sweep's points, serially or through Dask (docs/design.md, "Sweeps").

`run_point` is the one pure function that runs a point, in this process or on a Dask worker: it
writes the point's own result file and returns the path and the summary row, never arrays.
`run_sweep` hands the points that are not yet complete to Dask (or runs them one after another),
collects the rows by point id and writes the summary table: the CSV as points finish, the CSV and
the HDF5 table at the end. Ctrl-C and SIGTERM stop it with every finished point kept; one sweep at
a time runs in a results folder, and running it again finishes it, keeping the run times of the
points it skips. Before anything is written, every name the sweep and its points write must be a
regular file or nothing, and the results folder and its points/ folders or nothing yet
(meshsim.files; docs/sweeps.md, "What a sweep writes").
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, files
from .. import run as runner
from ..errors import InputError
from ..run import RunInterrupted, StopSignals
from ..scenario import load_scenario, toml_repr
from .spec import Point, Sweep
from .stop import RUNNING, STOP_REQUESTS, request_stop, running_points
from .table import temporary_path, write_summary


class SweepInterrupted(Exception):
    """Ctrl-C or SIGTERM stopped the sweep, or (with `why`) the cluster stopped running it; every
    finished point is kept and listed in the summary."""

    def __init__(self, sweep: Sweep, n_done: int, why: str = ""):
        self.sweep = sweep
        self.why = why
        super().__init__(f"{why or 'interrupted'}: {n_done} of {len(sweep.points)} points complete; the summary "
                         f"is {sweep.summary_csv}; run the sweep again to finish it")


# ---------------------------------------------------------------------------------------------
# Running one point


def point_status(point: Point) -> str:
    """"complete", "stale" (complete, but of another scenario), "incomplete" or "new". Only a
    regular file is opened: anything else at the point's name (which a run refuses) is "incomplete"."""
    import h5py

    from ..output import incomplete_path

    final = Path(point.output)
    if os.path.lexists(final):
        if not files.is_regular(final):
            return "incomplete"
        try:
            with h5py.File(final, "r") as f:
                complete = bool(f.attrs.get("complete", False))
                resolved = f.attrs.get("scenario_resolved", "")
        except OSError:
            return "incomplete"
        if not complete:
            return "incomplete"
        return "complete" if resolved == point.resolved else "stale"
    return "incomplete" if os.path.lexists(incomplete_path(final)) else "new"


def can_resume(point: Point) -> bool:
    """Whether the point has a stopped file of its own scenario with a checkpoint that goes with it
    (meshsim.checkpoint): it then resumes rather than running from its start."""
    import h5py

    from ..checkpoint import checkpoint_path, scenario_digest
    from ..output import incomplete_path, open_result_file

    final = Path(point.output)
    inc, ck = incomplete_path(final), checkpoint_path(final)
    if not (files.is_regular(inc) and files.is_regular(ck)):
        return False
    try:
        with open_result_file(inc) as f:
            run_id, resolved = f.attrs.get("run_id"), f.attrs.get("scenario_resolved", "")
        with h5py.File(ck, "r") as c:
            return (resolved == point.resolved and c.attrs.get("run_id") == run_id
                    and c.attrs.get("scenario_sha256") == scenario_digest(resolved))
    except OSError:
        return False


def row_of_file(path) -> dict:
    """The summary row of a complete point file: every scalar of its /summary group."""
    from ..report import read_summary

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


def _earlier_rows(sweep: Sweep) -> dict:
    """What the summary table an earlier run of the sweep left (summary.csv) says of each point, by
    id: its status, path, run_seconds and wall_seconds. Empty without a readable table: it only
    keeps the run times of the points that are complete already."""
    import csv
    import io

    path = sweep.summary_csv
    if not files.is_regular(path):
        return {}
    keep = ("status", "path", "run_seconds", "wall_seconds")
    try:
        text = files.read_bounded(path, str(path), "sweep table").decode("utf-8", errors="replace")
        return {r["point_id"]: {k: r.get(k) for k in keep}
                for r in csv.DictReader(io.StringIO(text, newline="")) if r.get("point_id")}
    except (InputError, csv.Error):
        return {}


def _number(text) -> float | None:
    """A finite number written in a table, or None."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _skipped_row(point: Point, earlier: dict) -> dict | None:
    """The row of a point that is complete before the sweep runs (`_done_row`), with the
    run_seconds of the run that wrote its file: the earlier table's, where its row of the point is
    done and describes the same file (the same wall_seconds). None if the point runs."""
    row = _done_row(point)
    old = earlier.get(point.id) if row is not None else None
    if old and old["status"] == "done" and old["path"] == point.output:
        seconds = _number(old["run_seconds"])
        if seconds is not None and (row.get("wall_seconds") is None
                                    or _number(old["wall_seconds"]) == row["wall_seconds"]):
            row["run_seconds"] = seconds
    return row


def run_point(point: Point, token: str | None = None, also_stop=None) -> dict:
    """Run one point and write its result file; return its summary row (docs/design.md, "Sweeps").

    Pure: the same point gives the same file wherever it runs. A point that raises is returned as a
    row with status "failed", its error and its traceback, so that the sweep goes on; Ctrl-C, and a
    stop asked for the sweep `token`, end the run at its next kernel-call boundary with an
    incomplete file, and are passed up (RunInterrupted); so does `also_stop()` returning True (the
    serial path's own signal flag).
    """
    row = {"point_id": point.id, "status": "failed", "path": point.output}

    def stop():
        return STOP_REQUESTS["all"] or token in STOP_REQUESTS["tokens"] or (also_stop is not None and also_stop())

    if stop():  # queued before the sweep stopped: leave no file behind
        return {"point_id": point.id, "status": "not run", "path": point.output}
    RUNNING[token] += 1
    try:
        sc = load_scenario(point.base_path, list(point.overrides), text=point.base_text)
        if sc.resolved_toml() != point.resolved:
            raise InputError(f"point {point.id}: this meshsim ({__version__}) resolves the point differently from "
                             "the one that read the sweep; run the same meshsim version everywhere")
        t0 = time.perf_counter()
        resumed = False
        if can_resume(point):  # stopped part-way before: it goes on from its checkpoint
            try:
                runner.resume_run(point.output, threads=point.threads, progress=False, stop=stop)
                resumed = True
            except InputError:  # it cannot after all (another meshsim wrote it, say): from its start
                pass
        if not resumed:
            runner.run_scenario(sc, point.output, threads=point.threads, progress=False, stop=stop)
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
        RUNNING[token] -= 1
    return row


def row_after_failure(point: Point, error: BaseException) -> dict:
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
    """Run every point that is not complete and write the summary table (docs/design.md, "Sweeps").

    client: a `distributed.Client` to run the points on; connect: instead, a callable returning a
    context manager that yields one (such as `dask_client`), entered only if a point needs running;
    with neither, the points run one after another in this process. on_row(point, row) is
    called as each point finishes. Complete points whose file holds the same scenario are skipped
    and their rows read from their files. Ctrl-C cancels what is queued or running, writes the
    summary of what finished, and raises SweepInterrupted.
    """
    t0 = time.perf_counter()
    # Ctrl-C and SIGTERM only ask the sweep to stop; it stops where it checks (between points, and
    # while it waits for the cluster), never inside Dask's or h5py's own code. A second signal stops
    # at once.
    with FolderLock(sweep), StopSignals() as signals:
        return _run_sweep(sweep, client, connect, progress, on_row, t0, signals)


def _run_sweep(sweep, client, connect, progress, on_row, t0, signals) -> SweepResult:
    from tqdm import tqdm

    def check():
        if signals.requested:
            raise KeyboardInterrupt

    earlier = _earlier_rows(sweep)
    rows = {p.id: _skipped_row(p, earlier) or {"point_id": p.id, "status": "not run", "path": p.output}
            for p in sweep.points}
    del earlier
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


def _sweep_files(sweep: Sweep) -> dict:
    """Every name in the results folder that the sweep itself writes, renames or removes, with what
    it holds (the points' own files are in `_point_files`)."""
    return {sweep.output / ".lock": "sweep lock",
            sweep.summary_csv: "summary table", temporary_path(sweep.summary_csv): "summary table's temporary file",
            sweep.summary_h5: "summary table", temporary_path(sweep.summary_h5): "summary table's temporary file"}


def _point_files(point: Point) -> dict:
    """Every name that the run of a point writes, renames or removes, with what it holds."""
    from ..run import run_files

    return run_files(Path(point.output))


def _check_sweep_files(sweep: Sweep) -> None:
    """InputError, before anything is written, naming every path of the sweep that meshsim would
    have to write, rename or remove and that is not a regular file or nothing (a folder, a device,
    a FIFO, a socket or a symbolic link), and the results folder or its points/ folder if either is
    anything but a folder or nothing (meshsim.files)."""
    problems = []

    def check(test, *args):
        try:
            test(*args)
        except InputError as e:
            problems.extend(e.problems)

    check(files.check_folder, sweep.output, "sweep's results folder")
    if problems:
        raise InputError(problems)
    for path, what in _sweep_files(sweep).items():
        check(files.check_target, path, what)
    folders = {Path(folder) for folder in {os.path.dirname(p.output) for p in sweep.points}}
    for folder in sorted(folders):
        check(files.check_folder, folder, "folder of the points' result files")
    # One listing of each folder, not a look at every name: a sweep may have 100,000 points.
    odd = set()
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                odd.update(Path(e.path) for e in entries if not e.is_file(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):  # not made yet, or reported above
            pass
        except OSError as e:
            problems.append(f"{folder}: cannot be listed ({e.strerror or e})")
    if odd:
        for p in sweep.points:
            for path, what in _point_files(p).items():
                if path in odd:
                    check(files.check_target, path, what)
    if problems:
        raise InputError(problems)


# Opened never through a link, never waiting (a FIFO), never inherited by a child process.
_SAFE_OPEN = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class FolderLock:
    """One sweep at a time in a results folder: an exclusive lock on FOLDER/.lock while it runs, and
    a folder whose table belongs to another sweep file is refused (their tables would overwrite
    each other). Before anything is written, every name the sweep writes is checked
    (`_check_sweep_files`)."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep
        self.fd = None

    def __enter__(self):
        _check_sweep_files(self.sweep)
        out = self.sweep.output
        lock = out / ".lock"
        self.created = [p for p in (out, *out.parents) if not os.path.lexists(p)]
        self.new_lock = not os.path.lexists(lock)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{out}: cannot write the sweep's results there ({e.strerror or e})") from None
        self.fd = self._lock_file(lock, out)
        mine = str(Path(self.sweep.path).resolve())
        other = _sweep_of_table(self.sweep.summary_h5) or mine
        if other != mine:
            self.__exit__(InputError)
            raise InputError(f"{out}: holds the results of the sweep {other}; give this one another folder with -o "
                             "or sweep.output")
        return self

    @staticmethod
    def _lock_file(lock: Path, out: Path) -> int:
        """A descriptor of the regular file `lock` (made if missing, never through a link), holding
        its exclusive lock where the filesystem has locks."""
        try:
            fd, _ = files.lock_exclusive(lock, "sweep lock")  # unlocked on a filesystem without locks: unguarded
        except BlockingIOError:
            raise InputError(f"{out}: another meshsim sweep is running in this folder; wait for it, or give this "
                             "one another folder with -o or sweep.output") from None
        return fd

    def __exit__(self, exc_type=None, exc=None, tb=None):
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None
            if exc_type is InputError and self.new_lock:  # e.g. no scheduler to connect to: leave nothing
                files.remove(self.sweep.output / ".lock")
                try:
                    for p in self.created:
                        p.rmdir()
                except OSError:  # something was written after all
                    pass
        return False


def _sweep_of_table(path: Path) -> str | None:
    """The sweep file whose table `path` (summary.h5) is, or None without one: read only from a
    regular file, through the descriptor checked (never through a link)."""
    import stat

    import h5py

    try:
        fd = os.open(path, os.O_RDONLY | _SAFE_OPEN)
    except OSError:  # nothing there (or not one to read)
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            with h5py.File(fh, "r") as f:
                other = f.attrs.get("sweep_path")
        except (OSError, ValueError):  # not one of ours
            return None
    return other if isinstance(other, str) else None


def _keep_partial(rows: dict, sweep: Sweep) -> None:
    """After Ctrl-C, the rows of the points that did not report: complete if their file is (a
    worker may finish its point as the sweep stops), interrupted if they left an incomplete file."""
    from ..output import incomplete_path

    for p in sweep.points:
        r = rows[p.id]
        if r["status"] != "not run":
            continue
        done = _done_row(p)
        if done is not None:
            r.update(done)
        elif files.is_regular(incomplete_path(Path(p.output))):
            r.update(status="interrupted", path=str(incomplete_path(Path(p.output))))


def _run_on(client, todo, record, idle) -> None:
    """Submit every point to the Dask cluster and record each as it finishes (idle(client) is called
    while none does). A worker that dies is replaced by its nanny and its point rescheduled by Dask;
    a point that kills its worker every time (distributed.scheduler.allowed-failures) is recorded as
    failed."""
    import uuid

    from .cluster import as_completed, is_cancelled

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
            except Exception as e:
                if is_cancelled(e):  # the scheduler went away, or cancelled the points
                    raise _ClusterLost(f"the Dask cluster stopped running the points ({' '.join(str(e).split())})") \
                        from None
                row = row_after_failure(p, e)  # distributed.KilledWorker, or a worker that cannot import meshsim
            fut.release()
            record(p, row)
    except BaseException:
        # The points already running stop at their next kernel-call boundary and close their files
        # (marked incomplete) before the cluster goes: a worker killed mid-write could leave its
        # file locked. Queued points are dropped.
        try:
            client.run(request_stop, token)
            client.cancel(list(futures), force=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(client.run(running_points, token).values()):
                time.sleep(0.1)
        except Exception:  # a worker that is going away has nothing left to stop
            pass
        raise


# ---------------------------------------------------------------------------------------------
# Listing: the dry run and the closing lines


def format_points(sweep: Sweep, statuses=None) -> str:
    """The dry run: one line per point with its id, repetition, seed, values and status."""
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
    body = [[str(p.index), p.id, str(p.repetition), str(p.seed), *[toml_repr(v) for _, v in p.params],
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

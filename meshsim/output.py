"""HDF5 result files (docs/design.md, "Result files").

A run writes `NAME.incomplete.h5` while it goes and renames it to `NAME.h5` only when it finishes.
An interrupted run keeps the `.incomplete.h5` file, marked `complete = False`, holding every
cycle done (a killed one, every cycle up to its last flush). Every dataset carries `units` and
`description` attributes, is chunked along time and compressed, and has dimension scales (`cycle`,
`row`, `col`, ...) so xarray can open it.

The file's life keeps it readable whenever the run is stopped, SIGKILL included (docs/results.md):

1. Its layout (every group, dataset, scale and attribute the run fills) is written under a
   temporary name, `NAME.incomplete.h5.part`, and renamed to `NAME.incomplete.h5` only once it is
   on disk and the file is in HDF5's single-writer/multiple-reader (SWMR) mode.
2. While the run goes, it only appends to and overwrites those datasets, and every flush goes
   through SWMR, which writes metadata in an order that leaves the file consistent on disk at every
   moment. A flush writes the data first; then the `cycles_done` attribute and the provisional
   summary (two alternating slots of `summary/provisional`, so that one is always whole); then
   flushes again: `cycles_done` never exceeds what the datasets hold.
3. The rest (per-unit totals, the summary as attributes, the marks) needs new objects, which SWMR
   does not allow: it is written on a copy of the flushed file, which then replaces
   `NAME.incomplete.h5` (an interrupted run) or becomes `NAME.h5` (a complete one). A stop while
   finishing leaves the file as last flushed.

A file whose writer was killed still carries HDF5's mark of a file open for writing: `open_result_file`
opens it (through SWMR's reader), and so does any HDF5 program that opens it with SWMR read
(`h5py.File(path, "r", swmr=True)`) or after `h5clear -s`.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import re
import sys
import uuid
import weakref
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from . import __version__, files
from .errors import InputError, WriteFailed

SCHEMA_VERSION = 1

#: HDF5 format bounds of result files: SWMR needs the 1.10 format, which every HDF5 since 1.10 reads.
LIBVER = ("v110", "v110")
#: Bytes of one slot of summary/provisional when it is created (it widens if a summary needs more).
PROVISIONAL_WIDTH = 16384
#: While a file is laid out or finished (whole datasets written at once), HDF5 keeps no chunk in
#: memory: a write that fails then fails in the call that made it, where the writer sees it, not
#: when a dataset's handle is dropped (where h5py can only print it). The running file, which is
#: appended to a little at a time, is opened again with HDF5's usual cache.
BUILD_CACHE = dict(rdcc_nbytes=0)

def incomplete_path(final: Path) -> Path:
    """Where a run writes before it is complete: NAME.incomplete.h5 beside NAME.h5."""
    return final.with_name(final.stem + ".incomplete" + final.suffix)


def part_path(path: Path) -> Path:
    """The temporary name a result file is built under before it takes `path`."""
    return path.with_name(path.name + ".part")


def lock_path(final: Path) -> Path:
    """The lock a run to `final` (NAME.h5) holds while it goes: NAME.lock."""
    return final.with_name(final.stem + ".lock")


def open_result_file(path) -> h5py.File:
    """A result file opened for reading: a finished or interrupted run's as any HDF5 file, a killed
    run's (still marked open for writing by HDF5) through SWMR's reader. OSError for anything but
    a regular file (a FIFO would block the open, a device be read without end)."""
    try:
        files.check_regular(path, str(path), "result file")
    except InputError as e:
        raise OSError(e.problems[0]) from None
    try:
        return h5py.File(path, "r")
    except OSError as first:
        try:
            return h5py.File(path, "r", swmr=True)
        except OSError:
            raise first from None


def read_provisional(f: h5py.File) -> dict | None:
    """The summary a killed run last flushed (from summary/provisional), or None: the whole slot
    with the most cycles not beyond the file's cycles_done."""
    if "summary" not in f or "provisional" not in f["summary"]:
        return None
    done = int(f.attrs.get("cycles_done", 0))
    best = None
    for row in f["summary/provisional"][()]:
        text = bytes(row).split(b"\0", 1)[0]
        try:
            entry = json.loads(text)
            cycles, summary = int(entry["cycles_done"]), dict(entry["summary"])
        except (ValueError, KeyError, TypeError):
            continue  # empty, or cut by the stop
        if cycles <= done and (best is None or cycles > best[0]):
            best = (cycles, summary)
    return None if best is None else best[1]


def open_result(path: Path, scenario, machine: str, threads: int, cycles_requested: int) -> h5py.File:
    """A new result file at `path` with the root attributes of docs/design.md, "Result files", marked
    incomplete (the writer sets cycles_done and complete as the run goes). A regular file left at
    `path` (a killed run's) is replaced; anything else there is refused (meshsim.files)."""
    files.check_target(path)
    files.remove(path)
    f = h5py.File(path, "x", libver=LIBVER, **BUILD_CACHE)  # a new file
    a = f.attrs
    a["schema_version"] = SCHEMA_VERSION
    a["meshsim_version"] = __version__
    a["machine"] = machine
    a["scenario_name"] = scenario.name
    a["scenario_path"] = scenario.path or ""
    a["scenario_text"] = scenario.source_text
    a["scenario_resolved"] = scenario.resolved_toml()
    a["overrides"] = "\n".join(f"{k}={v!r}" for k, v in scenario.overrides)
    a["seed"] = np.uint64(scenario.get("run", "seed"))
    a["threads"] = threads
    a["cycles_requested"] = cycles_requested
    a["cycles_done"] = np.int64(0)
    a["complete"] = False
    a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    a["run_id"] = uuid.uuid4().hex  # kept when the run resumes; its checkpoint carries it too
    write_model_attrs(a, scenario)
    return f


def write_model_attrs(a, scenario) -> None:
    """The model a transformer workload simulates, as root attributes (docs/design.md, "Result files"):
    model (one line: parameters and shape), model_parameters and model_parameters_without_embeddings,
    and model_notes (what the config gave unasked and what an override changed, one line each)."""
    from .transformer import describe_model, model_parameters, scenario_model

    found = scenario_model(scenario.values)
    if found is None:
        return
    model, vocab = found
    counts = model_parameters(model, vocab)
    a["model"] = describe_model(model, vocab)
    a["model_parameters"] = np.int64(counts["total"])
    a["model_parameters_without_embeddings"] = np.int64(counts["without_embeddings"])
    a["model_notes"] = "\n".join(getattr(scenario, "model_notes", ()))


class RunLock:
    """While a run writes `NAME.h5` (and its incomplete file and checkpoint), it holds an exclusive
    lock on `NAME.lock` beside it, so that a second run to the same result, or `--resume` of a run
    still going, is refused instead of replacing a file being written. The lock goes with the
    process (a killed run holds none); the file is removed when the run ends. Where the system has
    no `fcntl` (Windows) nothing is locked."""

    def __init__(self, final: Path):
        self.final = Path(final)
        self.path = lock_path(self.final)
        self.fd = None

    def acquire(self) -> RunLock:
        try:
            import fcntl  # noqa: F401
        except ImportError:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd, locked = files.lock_exclusive(self.path, "run lock")
        except BlockingIOError:
            locked = False
        else:
            if not locked:
                os.close(fd)
        if not locked:
            raise InputError(f"{self.final}: another run is writing it now (it holds {self.path.name}); wait "
                             "for it to end, or write elsewhere with -o")
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:
                if files.same_file(self.path, self.fd):
                    files.remove(self.path)
            except OSError as e:  # a lock file left is harmless: the next run takes it
                print(f"meshsim: warning: {self.path} could not be removed ({e.strerror or e})", file=sys.stderr)
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


def describe(ds, units: str, description: str) -> None:
    """Set a dataset's `units` and `description` attributes."""
    ds.attrs["units"] = units
    ds.attrs["description"] = description


def plain(v):
    """An HDF5 attribute's value as Python has it: numpy scalars and arrays as Python ones, bytes as text."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


#: Rows a resumed run copies at a time from the file it resumes (bounds the memory it needs).
COPY_BYTES = 64 * 2**20


def appendable(f: h5py.File) -> list:
    """The paths of a result file's datasets that grow along their first axis, sorted."""
    out = []
    f.visititems(lambda name, obj: out.append(name) if isinstance(obj, h5py.Dataset) and obj.maxshape
                 and obj.maxshape[0] is None else None)
    return sorted(out)


def copy_rows(src: h5py.Dataset, dst: h5py.Dataset, n: int) -> None:
    """The first `n` rows of `src` into `dst` (resized to `n`), a bounded slab at a time."""
    dst.resize(n, axis=0)
    row_bytes = max(1, src.dtype.itemsize * int(np.prod(src.shape[1:], dtype=np.int64)))
    step = max(1, COPY_BYTES // row_bytes)
    for i in range(0, n, step):
        j = min(n, i + step)
        dst[i:j] = src[i:j]



class ResultFile:
    """The life of one result file (the module's docstring), shared by the machines' writers: its
    layout built under a temporary name, then SWMR appends and flushes while the run goes, then the
    totals and summary on a copy that becomes NAME.h5 (complete) or replaces NAME.incomplete.h5.

    A writer builds its layout in its constructor (and before entering); entering the context
    starts the run's part of the life; leaving it by an exception keeps the file as last flushed,
    marked incomplete. Between entering and finishing, only `_put`/`_append` to datasets, in-place
    writes and `flush` are allowed; methods that create objects call `_finishing` first."""

    def __init__(self, final_path, scenario, machine: str, threads: int, cycles_requested: int,
                 compression_level: int):
        self.final_path = Path(final_path)
        self.path = incomplete_path(self.final_path)
        self.scenario_path = str(scenario.path or "")
        self.part = part_path(self.path)
        self.comp = dict(compression="gzip", compression_opts=compression_level) if compression_level > 0 else {}
        self.finished = False
        self.broken = False  # a write failed: the file is closed without writing more
        self.flushed_cycle = None  # cycles_done at the last flush that reached the file
        self.checkpoint_cycle = None  # cycles_done of the checkpoint beside the file
        self.state = "building"  # then "running" (SWMR, at self.path), then "finishing" (a copy at self.part)
        self._slot = 0
        self._appendable = None
        self.start_cycle = None  # a resumed run's: the cycles its file holds once laid out
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open_result(self.part, scenario, machine, threads, cycles_requested)
        _BUILDING[self.part] = self  # until the layout is done: what abandon_layout discards

    def _scale(self, parent, name, values, units, description, grow=False, chunk=8192):
        kw = dict(maxshape=(None,), chunks=(chunk,)) if grow else dict(chunks=True)
        ds = parent.create_dataset(name, data=values, **kw, **self.comp)
        describe(ds, units, description)
        ds.make_scale(name)
        return ds

    @staticmethod
    def _append(ds, data) -> None:
        n = ds.shape[0]
        ds.resize(n + len(data), axis=0)
        ds[n:] = data

    @staticmethod
    def _put(ds, t0: int, data) -> None:
        n = t0 + len(data)
        if ds.shape[0] != n:
            ds.resize(n, axis=0)
        ds[t0:n] = data

    @property
    def run_id(self) -> str:
        return plain(self.f.attrs["run_id"])

    def lengths(self) -> dict:
        """Rows held by each dataset that grows along its first axis (path -> rows): what a
        checkpoint records (meshsim.checkpoint)."""
        if self._appendable is None:  # the layout is fixed once the run goes: listed once
            self._appendable = appendable(self.f)
        return {name: int(self.f[name].shape[0]) for name in self._appendable}

    def resume_from(self, old: h5py.File, lengths: dict) -> None:
        """While the layout is built: the rows of the run being resumed, from its file `old`, each
        appendable dataset up to the length its checkpoint recorded, and the root attributes that
        name the run. InputError if the two layouts differ (another meshsim wrote `old`)."""
        names = appendable(self.f)
        other = sorted(set(names) ^ set(lengths)) + [n for n in names if n not in old]
        if other:
            raise InputError(f"{self.path}: its datasets ({', '.join(other[:4])}) differ from what this meshsim lays "
                             "out for its scenario, so the run cannot resume; run the scenario again")
        short = [n for n in names if old[n].shape[0] < lengths[n]]
        if short:
            n = short[0]
            raise InputError(f"{self.path}: {n} holds {old[n].shape[0]} rows and its checkpoint counts {lengths[n]}: "
                             "the file was cut or replaced, so the run cannot resume; run the scenario again")
        for name in names:
            copy_rows(old[name], self.f[name], lengths[name])
        for key in ("scenario_path", "scenario_text", "overrides", "created", "run_id"):
            self.f.attrs[key] = old.attrs[key]
        if "model_notes" in old.attrs:  # said when the config was read; a resumed run reads the resolved scenario
            self.f.attrs["model_notes"] = old.attrs["model_notes"]
        self._resumed()

    def _resumed(self) -> None:
        """After `resume_from`: a writer's own counts of what its datasets hold."""
        return None

    def sync(self) -> None:
        """Force what the last flush wrote to disk (before a checkpoint that counts on it); OSError
        if the system reports that it could not (the flushed data may then not be on disk)."""
        try:
            fd = self.f.id.get_vfd_handle()
        except (ValueError, TypeError, RuntimeError):  # a driver without a file descriptor
            return
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):  # else: a file that cannot sync
                raise

    def _start(self) -> None:
        """The layout is built: the provisional summary's slots, SWMR on, and the file under its name.
        If that fails, the half-made file is discarded and removed (a failed write: WriteFailed)."""
        _BUILDING.pop(self.part, None)
        try:
            self._start_swmr()
        except BaseException as e:
            self.finished = True
            discard(self.f)
            files.remove(self.part)
            words = system_words(e) if isinstance(e, Exception) else None
            if words is not None:
                raise WriteFailed(f"laying out its file failed ({words})", errno=_errno_of(e)) from None
            raise

    def _start_swmr(self) -> None:
        s = self.f["summary"].create_dataset(
            "provisional", shape=(2, PROVISIONAL_WIDTH), maxshape=(2, None), dtype=np.uint8,
            chunks=(1, PROVISIONAL_WIDTH), compression="gzip", compression_opts=1)
        describe(s, "bytes", "the summary at the last flush of a run stopped without finishing, as JSON "
                             "{cycles_done, summary} in two alternating slots (NUL-padded); removed when the run "
                             "finishes or is interrupted")
        self.f.flush()
        names = _handles(self)
        self.f.close()  # flushed: nothing is left to write
        self.f = h5py.File(self.part, "r+", libver=LIBVER)  # with HDF5's usual chunk cache (BUILD_CACHE)
        _rebind(self, names)
        self.f.swmr_mode = True
        files.replace(self.part, self.path)
        self.state = "running"
        self.flushed_cycle = self.start_cycle

    def flush(self, cycles_done: int, summary: dict | None = None) -> None:
        """Make everything written so far durable and readable: the data, then cycles_done and, while
        the run goes, `summary` as the provisional summary (what a killed run's file shows)."""
        if self.state != "running":
            self.f.attrs["cycles_done"] = np.int64(cycles_done)
            self.f.flush()
            return
        self._check_still_there()
        self.f.flush()
        if summary is not None:
            text = json.dumps({"cycles_done": int(cycles_done),
                               "summary": {k: plain(v) for k, v in summary.items()}}).encode()
            ds = self.f["summary/provisional"]
            if len(text) >= ds.shape[1]:
                ds.resize(len(text) + PROVISIONAL_WIDTH, axis=1)
            row = np.zeros(ds.shape[1], np.uint8)
            row[:len(text)] = np.frombuffer(text, np.uint8)
            ds[self._slot] = row
            self._slot ^= 1
        self.f.attrs.modify("cycles_done", np.int64(cycles_done))
        self.f.flush()
        self.flushed_cycle = int(cycles_done)

    def _check_still_there(self) -> None:
        """WriteFailed if the file's name no longer leads to the file being written (removed, renamed
        away or replaced while the run goes): its data would be lost with it."""
        if not files.same_file(self.path, self.f.id.get_vfd_handle()):
            self.broken = True
            raise WriteFailed(f"{self.path.name} was removed, renamed or replaced while the run wrote it",
                              vanished=True)

    def write_summary(self, summary: dict) -> None:
        """The run's figures as attributes of /summary (replacing those written before), when it
        finishes; while it runs, `flush` takes them."""
        s = self.f["summary"].attrs
        for k, v in summary.items():
            s[k] = v

    def _finishing(self) -> None:
        """Leave SWMR for the end of the file's life: close the flushed file and go on in a copy of
        it, which `finish` puts in its place."""
        if self.state != "running":
            return
        self._check_still_there()
        names = _handles(self)
        self._close_file()
        self.state = "finishing"  # from here, a failure removes the copy and keeps the flushed file
        try:
            files.copy_new(self.path, self.part)
            self.f = h5py.File(self.part, "r+", libver=LIBVER, **BUILD_CACHE)
        except (OSError, InputError) as e:
            self.finished = True
            files.remove(self.part)
            why = e.problems[0] if isinstance(e, InputError) else system_words(e)
            raise WriteFailed(f"copying it to {self.part.name} to write the run's totals failed ({why})",
                              errno=getattr(e, "errno", None)) from None
        _rebind(self, names)

    def finish(self, summary: dict, cycles_done: int, complete: bool) -> Path:
        """Write the summary, mark the file and close it; it becomes NAME.h5 if complete, else
        NAME.incomplete.h5 again."""
        self._finishing()
        if "provisional" in self.f["summary"]:
            del self.f["summary/provisional"]
        self.write_summary(summary)
        self.f.attrs["cycles_done"] = np.int64(cycles_done)
        self.f.attrs["complete"] = complete
        self._close_file()
        self.finished = True
        target = self.final_path if complete else self.path
        try:
            files.replace(self.part, target)
        except (OSError, InputError) as e:
            files.remove(self.part)
            why = e.problems[0] if isinstance(e, InputError) else system_words(e)
            raise WriteFailed(f"renaming the finished copy {self.part.name} to {target.name} failed ({why})",
                              errno=getattr(e, "errno", None)) from None
        if complete:
            try:
                files.remove(self.path)
            except OSError as e:  # the run is done all the same
                print(f"meshsim: warning: the run is complete in {target}, but {self.path} could not be removed "
                      f"({system_words(e)}); remove it by hand", file=sys.stderr)
        return target

    def _close_file(self) -> None:
        """Close the file after flushing it. A flush that fails marks the writer broken and discards
        the file (closing it plainly would make HDF5 write again, fail again and crash the process
        at its exit)."""
        try:
            self.f.flush()
        except BaseException:
            self.broken = True
            discard(self.f)
            raise
        self.f.close()

    def close_incomplete(self) -> Path:
        """Close a file whose run broke off before `finish`, keeping it as last flushed, marked
        incomplete."""
        if self.finished:
            return self.path
        self.finished = True
        _BUILDING.pop(self.part, None)
        try:
            if self.broken or self.state != "running":
                discard(self.f)  # writes failed, or a layout or copy removed anyway: HDF5 writes no more
            else:
                try:
                    self._close_file()
                except (OSError, RuntimeError):  # discarded: the file stays as last flushed
                    pass
        finally:
            if self.state != "running":
                files.remove(self.part)  # the layout alone, or a copy being finished
        return self.path

    @contextmanager
    def writing(self, what: str = "writing the result"):
        """Turn a failed write inside (a full disk, an I/O error, a file-size limit: an OSError, or
        the RuntimeError h5py raises when HDF5's write fails) into WriteFailed, and mark the file so
        that closing it writes nothing more (the file on disk stays as last flushed)."""
        try:
            yield
        except WriteFailed:
            self.broken = True
            raise
        except (OSError, RuntimeError) as e:
            words = system_words(e)
            if words is None:
                raise
            self.broken = True
            raise WriteFailed(f"{what} failed ({words})", errno=_errno_of(e) or getattr(e, "errno", None)) from None

    def __enter__(self):
        if self.state == "building":
            self._start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.close_incomplete()
        return False


_H5_ERRNO = re.compile(r"errno = (\d+), error message = '([^']*)'")


def system_words(e: BaseException) -> str | None:
    """The system's words for a failed write (an OSError's, or those HDF5 puts in the RuntimeError
    h5py raises: "errno = 28, error message = 'No space left on device'"), or None when `e` is
    not a failed write."""
    if not isinstance(e, (OSError, RuntimeError)):
        return None
    m = _H5_ERRNO.search(str(e))  # h5py's errors carry the system's in HDF5's text
    if m:
        return m.group(2)
    if isinstance(e, OSError) and e.errno is not None:
        return (e.strerror or str(e) or type(e).__name__).splitlines()[0]
    if "write failed" in str(e) or "file write" in str(e):
        return str(e).splitlines()[0]
    return None


def _errno_of(e: BaseException) -> int | None:
    m = _H5_ERRNO.search(str(e))
    return int(m.group(1)) if m else None


#: Files `discard` has dealt with: HDF5 may refuse to close one, and asking it about one again then
#: crashes the process.
_DISCARDED: weakref.WeakSet = weakref.WeakSet()


def discard(f: h5py.File) -> None:
    """Close an HDF5 file whose writes failed without writing to it again: its descriptor is first
    pointed at the null device, so what HDF5 writes while closing goes nowhere, and the file on disk
    stays as its last successful flush left it (closing it plainly fails again and leaves HDF5 to
    crash the process at exit). Never after a plain close of the same file was tried; once only."""
    if f in _DISCARDED:
        return
    _DISCARDED.add(f)
    try:
        if not f.id.valid:  # closed already
            return
    except (ValueError, TypeError, RuntimeError):
        return
    try:
        fd = f.id.get_vfd_handle()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except (OSError, ValueError, TypeError, RuntimeError):  # closed already, or a driver without a descriptor
        pass
    try:
        f.close()
    except (OSError, ValueError, RuntimeError):
        pass


#: Writers whose layout is being built (by part path): a writer's constructor that fails leaves its
#: file here for `abandon_layout`.
_BUILDING: dict = {}


def abandon_layout(final: Path) -> None:
    """Discard and remove the half-built layout of a run to `final` whose writer's constructor failed."""
    w = _BUILDING.pop(part_path(incomplete_path(Path(final))), None)
    if w is not None:
        w.finished = True
        discard(w.f)
        files.remove(w.part)


def _handles(writer) -> list:
    """(container, key, object name) of every HDF5 object a writer holds, in its attributes and
    one level of dicts in them."""
    out = []
    for key, value in vars(writer).items():
        if key == "f":
            continue
        if isinstance(value, h5py.HLObject):
            out.append((writer, key, value.name))
        elif isinstance(value, dict):
            out.extend((value, k, v.name) for k, v in value.items() if isinstance(v, h5py.HLObject))
    return out


def _rebind(writer, handles) -> None:
    """Point the handles listed by `_handles` at the same objects in the writer's current file."""
    for container, key, name in handles:
        obj = writer.f[name]
        if container is writer:
            setattr(writer, key, obj)
        else:
            container[key] = obj


class TokenTables(ResultFile):
    """A generation's file (docs/decode.md, docs/ipu.md and docs/rdu.md): a tokens/ table, one row a token,
    and a cache dataset of one row a token, written as the tokens come; the count moves last, so a write
    cut short is written again over the same rows."""

    def _tokens(self, columns: dict, description: str, token: str) -> None:
        """The tokens/ group: its scale and one growing column a name of `columns` (name -> (units, what))."""
        g = self.f.create_group("tokens")
        g.attrs["description"] = description
        self.n = 0
        self.token = self._scale(g, "token_row", np.zeros(0, np.int64), "1", token, grow=True)
        self.cols = {}
        for name, (units, desc) in columns.items():
            ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(8192,), **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.token)
            self.cols[name] = ds

    def _resumed(self) -> None:
        self.n = int(self.token.shape[0])

    def append(self, table, caches) -> None:
        """Rows of the tokens just generated (the columns in order) and the cache after each, after those
        written before."""
        n0 = self.n
        self._put(self.token, n0, np.arange(n0, n0 + len(table), dtype=np.int64))
        for i, ds in enumerate(self.cols.values()):
            self._put(ds, n0, table[:, i])
        self._put(self.cache, n0, np.asarray(caches).astype(self.cache.dtype))
        self.n = n0 + len(table)

    def finish(self, summary: dict, cycles_done: int, complete: bool) -> Path:
        """As ResultFile.finish; a complete run also records its length as the cycles requested."""
        self._finishing()
        if complete:
            self.f.attrs["cycles_requested"] = cycles_done
        return super().finish(summary, cycles_done, complete)

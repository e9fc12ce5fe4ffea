"""Checkpoints: what a stopped run needs to go on from where its file ends (docs/results.md,
"Resuming a run").

While a run goes, a flush of its result file is followed, when one is due (meshsim.run), by a
checkpoint beside it, `NAME.checkpoint.h5`: the machine's whole state between kernel calls at the
flushed cycle, and the length of every appendable dataset of the result file then. It is written
under a temporary name, forced to disk and renamed over the one before, so the checkpoint on disk
is always a whole one, and never ahead of the result file (the file is flushed and forced to disk
first). `meshsim run --resume NAME.incomplete.h5`
lays out a new file, copies each appendable dataset up to its recorded length, restores the state
and runs on: the datasets it finishes with are those of a run never stopped. A finished run
removes its checkpoint.

A checkpoint is an HDF5 file:
    attributes  format, meshsim_version, machine, run_id (the result file's), cycles_done, done (the
                progress bar's count), scenario_sha256 (of the result's resolved scenario),
                inputs_sha256 (of the compiled inputs: a trace's events, say), per_call (the
                kernel call's length, which the run's stops follow)
    lengths/    one attribute per appendable dataset of the result: its path -> rows held
    state/      the machine's arrays (gzip level 1), and the attribute `values`: its other state
                as JSON (integers exact, whatever their size)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from .errors import InputError
from .output import plain

FORMAT = 1


def checkpoint_path(final: Path) -> Path:
    """Where the checkpoint of the run whose finished file is `final` (NAME.h5) lives: NAME.checkpoint.h5."""
    final = Path(final)
    return final.with_name(final.stem + ".checkpoint" + final.suffix)


def scenario_digest(resolved: str) -> str:
    """The checkpoint's mark of the scenario it belongs to."""
    return hashlib.sha256(resolved.encode()).hexdigest()


@dataclass
class Checkpoint:
    """A checkpoint read back: its attributes, the result's dataset lengths, and the machine's state."""

    path: Path
    attrs: dict
    lengths: dict
    values: dict
    arrays: dict

    @property
    def cycles_done(self) -> int:
        return int(self.attrs["cycles_done"])


def write(path: Path, *, machine: str, run_id: str, resolved: str, inputs: str, per_call: int, cycles_done: int,
          done: int, lengths: dict, values: dict, arrays: dict) -> None:
    """Write a checkpoint at `path`, whole or not at all: under a temporary name, forced to disk,
    then renamed (and the rename forced to disk)."""
    part = path.with_name(path.name + ".part")
    try:
        with h5py.File(part, "w") as f:
            a = f.attrs
            a["format"] = FORMAT
            a["meshsim_version"] = __version__
            a["machine"] = machine
            a["run_id"] = run_id
            a["scenario_sha256"] = scenario_digest(resolved)
            a["inputs_sha256"] = inputs
            a["per_call"] = np.int64(per_call)
            a["cycles_done"] = np.int64(cycles_done)
            a["done"] = np.int64(done)
            g = f.create_group("lengths")
            for name, n in lengths.items():
                g.attrs[name] = np.int64(n)
            s = f.create_group("state")
            s.attrs["values"] = json.dumps(values)
            for name, arr in arrays.items():
                arr = np.ascontiguousarray(arr)
                kw = dict(compression="gzip", compression_opts=1, shuffle=arr.itemsize > 1) if arr.size > 64 else {}
                s.create_dataset(name, data=arr, **kw)
        fsync_path(part)
        os.replace(part, path)
        fsync_path(path.parent)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def fsync_path(path: Path) -> None:
    """Force a file, or a folder's entries, to disk (where the system allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a folder on a system that cannot sync one
        pass
    finally:
        os.close(fd)


def read(path: Path, result: Path) -> Checkpoint:
    """The checkpoint at `path`, read whole; InputError (naming `result`, the file being resumed)
    if it is missing or unreadable."""
    if not path.exists():
        raise InputError(f"{result}: no checkpoint {path.name} beside it, so the run cannot resume: it was stopped "
                         "before its first flush, or the file was moved without it; run the scenario again")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: plain(v) for k, v in f.attrs.items()}
            if int(attrs.get("format", 0)) != FORMAT:
                raise InputError(f"{path}: format = {attrs.get('format')!r}: this meshsim reads checkpoints of format "
                                 f"{FORMAT}; run the scenario again")
            lengths = {k: int(v) for k, v in f["lengths"].attrs.items()}
            values = json.loads(f["state"].attrs["values"])
            arrays = {k: ds[()] for k, ds in f["state"].items()}
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"{path}: the checkpoint of {result} cannot be read ({e}); run the scenario again") from None
    return Checkpoint(path=path, attrs=attrs, lengths=lengths, values=values, arrays=arrays)

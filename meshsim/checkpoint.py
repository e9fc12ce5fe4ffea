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
                kernel call's length, which the run's stops follow), state_sha256 (see below)
    lengths/    one attribute per appendable dataset of the result: its path -> rows held
    state/      the machine's arrays (gzip level 1), and the attribute `values`: its other state
                as JSON (integers exact, whatever their size)

`state_sha256` is a SHA-256 digest of everything else in the checkpoint: its other attributes, the
lengths, the values' JSON text and every array's name, type, shape and bytes (`state_digest`). A
checkpoint whose contents do not give its digest back was changed or damaged after it was
written, and is refused: resuming from it would finish a wrong result that looks complete.

The file is built in memory (h5py on a BytesIO) and written with plain writes, so a failed
write (a full disk) is an OSError and never leaves HDF5 holding a half-written file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from . import __version__, files
from .errors import InputError
from .output import plain

#: 2: with state_sha256.
FORMAT = 2


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


def state_digest(attrs: dict, lengths: dict, values_json: str, arrays: dict) -> str:
    """The checkpoint's `state_sha256`: of its attributes (but the digest itself), the result's
    lengths, the values' JSON text and every array (name, type, shape, bytes), in a fixed order."""
    h = hashlib.sha256()
    head = {k: (int(v) if isinstance(v, (int, np.integer)) else str(v)) for k, v in attrs.items()
            if k != "state_sha256"}
    h.update(json.dumps({"attrs": head, "lengths": {k: int(v) for k, v in lengths.items()}},
                        sort_keys=True).encode())
    h.update(b"\0values\0" + values_json.encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(b"\0" + json.dumps([name, arr.dtype.str, list(arr.shape)]).encode() + b"\0")
        h.update(arr.reshape(-1).view(np.uint8))
    return h.hexdigest()


def write(path: Path, *, machine: str, run_id: str, resolved: str, inputs: str, per_call: int, cycles_done: int,
          done: int, lengths: dict, values: dict, arrays: dict) -> None:
    """Write a checkpoint at `path`, whole or not at all: built in memory, written under a temporary
    name, forced to disk, then renamed (and the rename forced to disk). OSError if a write fails;
    InputError if `path` or its temporary name is taken by anything but a regular file."""
    part = path.with_name(path.name + ".part")
    attrs = dict(format=FORMAT, meshsim_version=__version__, machine=machine, run_id=run_id,
                 scenario_sha256=scenario_digest(resolved), inputs_sha256=inputs, per_call=int(per_call),
                 cycles_done=int(cycles_done), done=int(done))
    values_json = json.dumps(values)
    arrays = {name: np.ascontiguousarray(arr) for name, arr in arrays.items()}
    digest = state_digest(attrs, lengths, values_json, arrays)
    image = io.BytesIO()
    with h5py.File(image, "w") as f:
        a = f.attrs
        for k, v in attrs.items():
            a[k] = np.int64(v) if isinstance(v, int) else v
        a["state_sha256"] = digest
        g = f.create_group("lengths")
        for name, n in lengths.items():
            g.attrs[name] = np.int64(n)
        s = f.create_group("state")
        s.attrs["values"] = values_json
        for name, arr in arrays.items():
            kw = dict(compression="gzip", compression_opts=1, shuffle=arr.itemsize > 1) if arr.size > 64 else {}
            s.create_dataset(name, data=arr, **kw)
    files.check_target(path, "checkpoint")
    try:
        files.write_new(part, image.getbuffer())
        files.replace(part, path)
        files.fsync_path(path.parent)
    except BaseException:
        files.remove(part)
        raise



def missing(path: Path, result: Path, held: int | None = None) -> str:
    """What to say when `result` (the file being resumed) has no checkpoint at `path`: how many
    cycles the file keeps (`held`, its cycles_done, when known) and that it cannot resume."""
    if held == 0:
        return (f"{result}: the run was stopped before its first flush: the file holds no cycles, and there is no "
                f"checkpoint {path.name} beside it, so there is nothing to resume; run the scenario again")
    kept = "" if held is None else (f"holds {held:,} cycles (as of its last flush; `meshsim report` reads them), "
                                    "but ")
    return (f"{result}: {kept}no checkpoint {path.name} beside it, so the run cannot resume: it was stopped before "
            "the checkpoint that follows its first flush was written, or the file was moved without it; run the "
            "scenario again")


def cycles_of(path: Path, run_id: str) -> int | None:
    """The cycles_done of the checkpoint at `path` if it is a regular file of the run `run_id`, else
    None (none there, another run's, or unreadable); read as `read` would not: its attributes only."""
    if not files.is_regular(path):
        return None
    try:
        with h5py.File(path, "r") as f:
            if plain(f.attrs.get("run_id")) != run_id:
                return None
            return int(f.attrs["cycles_done"])
    except (OSError, KeyError, ValueError, TypeError, RuntimeError):
        return None


def read(path: Path, result: Path, held: int | None = None) -> Checkpoint:
    """The checkpoint at `path`, read whole; InputError (naming `result`, the file being resumed,
    and the cycles it holds, `held`, when given) if it is missing or unreadable."""
    if not os.path.lexists(path):
        raise InputError(missing(path, result, held))
    files.check_regular(path, str(path), "checkpoint")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: plain(v) for k, v in f.attrs.items()}
            if attrs.get("format") != FORMAT:
                raise InputError(f"{path}: format = {attrs.get('format')!r}: this meshsim reads checkpoints of format "
                                 f"{FORMAT}; run the scenario again")
            lengths = {k: int(v) for k, v in f["lengths"].attrs.items()}
            values_json = f["state"].attrs["values"]
            values_json = values_json.decode() if isinstance(values_json, bytes) else str(values_json)
            arrays = {k: ds[()] for k, ds in f["state"].items()}
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError, AttributeError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise InputError(f"{path}: the checkpoint of {result} cannot be read ({type(e).__name__}: {first}); it was "
                         "damaged: run the scenario again") from None
    if attrs.get("state_sha256") != state_digest(attrs, lengths, values_json, arrays):
        raise InputError(f"{path}: the checkpoint's contents do not match its digest (state_sha256): it was changed or "
                         f"damaged after it was written, so {result} cannot resume from it; run the scenario again")
    try:
        values = json.loads(values_json)
    except ValueError as e:
        raise InputError(f"{path}: the checkpoint's values cannot be read ({e}); run the scenario again") from None
    return Checkpoint(path=path, attrs=attrs, lengths=lengths, values=values, arrays=arrays)

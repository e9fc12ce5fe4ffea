"""The summary table of a sweep, written from its points' figures (docs/design.md, "Sweeps"): one
row per point in the sweep's order, as summary.csv (written as points finish) and as summary.h5
(one typed dataset per column); and the lines that list a sweep's points (the dry run) and close a run.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import RunFailed
from .spec import Sweep

# Columns of the summary table that describe the point rather than its result.
INFO_FIRST = ("point_id", "repetition", "seed")
INFO_LAST = ("status", "run_seconds", "path", "error", "traceback")


def table_columns(sweep: Sweep, rows: dict) -> list:
    """point_id, repetition, seed, the swept keys, status, the summary figures (the stable names of
    docs/design.md, "Result files", first, then the rest as they first appear), run_seconds, path,
    error, traceback."""
    from ..report import STABLE_SUMMARY_KEYS

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


def temporary_path(path: Path) -> Path:
    """The name a summary table is written under before it is renamed to `path`: .NAME.tmp beside it."""
    return path.with_name(f".{path.name}.tmp")


def write_summary(sweep: Sweep, rows: dict, hdf5: bool = True) -> tuple[Path, Path]:
    """Write summary.csv and (with `hdf5`) summary.h5 in the sweep's folder, each through a
    temporary name, so a reader never sees half a table. The HDF5 table has one dataset per column
    along `point`. Each is written as a new regular file and renamed over a regular file or nothing
    (meshsim.files): a folder, device, FIFO, socket or symbolic link at either name is refused
    (InputError), never written through or replaced."""
    import h5py

    from .. import files

    files.check_folder(sweep.output, "sweep's results folder")
    sweep.output.mkdir(parents=True, exist_ok=True)
    cols = table_columns(sweep, rows)
    table = table_rows(sweep, rows)
    tmp = temporary_path(sweep.summary_csv)
    with _writing_table(tmp):
        with files.open_text_new(tmp, newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(cols)
            for r in table:
                w.writerow([_csv_value(r.get(c)) for c in cols])
        files.replace(tmp, sweep.summary_csv)
    if not hdf5:
        return sweep.summary_csv, sweep.summary_h5

    # Built in memory and written as a new file: HDF5 itself opens no path.
    image = io.BytesIO()
    with h5py.File(image, "w") as f:
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
    tmp = temporary_path(sweep.summary_h5)
    with _writing_table(tmp):
        files.write_new(tmp, image.getvalue())
        files.replace(tmp, sweep.summary_h5)
    return sweep.summary_csv, sweep.summary_h5


@contextmanager
def _writing_table(tmp: Path):
    """A table written through `tmp`: a write that fails (a full disk) removes it and is RunFailed,
    saying that the points' files are kept and a rerun writes the table again."""
    from .. import files

    try:
        yield
    except OSError as e:
        files.remove(tmp)
        final = tmp.with_name(tmp.name[1:-len(".tmp")])
        raise RunFailed([f"{final}: the sweep's table could not be written ({e.strerror or e}).",
                         "Kept: every point's result file; running the sweep again once the cause is mended "
                         "writes the table again, and runs only the points not complete."]) from None


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

"""A result file as an object, for notebooks and scripts: what `meshsim.run(...)` returns and
`meshsim.load(path)` reads (docs/design.md, "Python API").

    import meshsim
    r = meshsim.run("scenarios/smoke.toml", migration={"policy": "none"})
    r.summary["li"]                  # the run's figures (the attributes of /summary)
    r.series.queued.plot()           # the per-cycle series as an xarray Dataset, labelled by cycle
    r.maps.busy_cycles.plot()        # per-unit totals: the mesh's per-PE maps, labelled by row and col
    again = meshsim.load(r.path)     # the same object from the file, later

A result is its HDF5 file (docs/results.md); the object reads it, lazily, through xarray and the
h5netcdf engine, and attaches the file's dimension scales (cycle, row, col, ...) as coordinates.
Nothing here runs a machine: `meshsim.run(...)` (meshsim/run.py) is `run_scenario` with the command
line's overrides given as arguments.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import InputError
from .output import open_result_file

#: The group of every machine's per-unit totals (docs/design.md, "Result files").
MAPS_GROUP = "units"


class Result:
    """A result file, read: `path`, `machine`, `name`, `complete`, `summary` (dict), `scenario` (the
    resolved scenario, section -> key -> value), `groups` (the file's groups), and its data as
    xarray Datasets: `series` (the machine's values along its time: the mesh's per cycle, the rdu's
    per interval, the ipu's per superstep), `maps` (per-unit totals: the mesh's per-PE maps by row and
    col, the rdu's per PCU, the ipu's per tile), `frames` (the mesh's per-PE occupancy frames) and
    `dataset(group)` for any group. Datasets are opened lazily: `.load()` reads one into memory."""

    def __init__(self, path):
        from .report import read_summary

        self.path = Path(path)
        root, summary = read_summary(self.path)  # InputError for what is not a meshsim result
        self._root = root
        self.machine = str(root.get("machine", ""))
        self.name = str(root.get("scenario_name", ""))
        self.complete = bool(root.get("complete", False))
        self.summary = dict(summary)
        resolved = root.get("scenario_resolved", "")
        self.scenario = _toml(resolved) if resolved else {}
        self._identity = self._identity_now(root.get("created"))
        self._datasets = {}

    @property
    def groups(self) -> list[str]:
        """The file's groups that hold data, in name order."""
        import h5py

        with open_result_file(self.path) as f:
            self._check_same_run(f)
            return sorted(k for k, v in f.items() if isinstance(v, h5py.Group) and k != "summary")

    def dataset(self, group: str):
        """The xarray Dataset of one group of the file, with the file's dimension scales as coordinates."""
        if group not in self._datasets:
            groups = self.groups
            if group not in groups:
                raise InputError(f"{self.path}: has no group {group!r}; it has {', '.join(groups)}")
            self._datasets[group] = _open_group(self.path, group)
        return self._datasets[group]

    def _identity_now(self, created):
        # a later run with the same result path replaces the file (a new file renamed over it)
        return os.stat(self.path).st_ino, created

    def _check_same_run(self, f) -> None:
        if self._identity_now(f.attrs.get("created")) != self._identity:
            raise InputError(f"{self.path}: has been written again by another run since it was loaded; load it "
                             "again, or give each run its own file (out=)")

    @property
    def series(self):
        """The machine's values along its time (its registry entry's series_group)."""
        from . import machine as machines

        return self.dataset(machines.get(self.machine).series_group)

    @property
    def maps(self):
        """Per-unit totals (MAPS_GROUP): on the mesh, every PE's busy cycles, tasks and queue as row x col maps."""
        return self.dataset(MAPS_GROUP)

    @property
    def frames(self):
        """The mesh's occupancy: per-PE queue depth and service frames, and the per-cycle depth histogram."""
        return self.dataset("occupancy")

    def report(self, window: int | None = None) -> dict:
        """Every figure recomputed from the file, and the diagnosis (`meshsim report --json`)."""
        from .analysis import analyse

        return analyse(self.path, window)

    def close(self) -> None:
        """Close the Datasets opened so far (they are closed, too, when the object is collected)."""
        for ds in self._datasets.values():
            ds.close()
        self._datasets.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        state = "complete" if self.complete else "incomplete"
        li = self.summary.get("li")
        shown = f", li={li:.4f}" if isinstance(li, float) else ""
        return f"<meshsim.Result {self.name!r}: {self.machine}, {state}, {self.summary.get('cycles', 0):,} cycles" \
               f"{shown}, {str(self.path)!r}>"

    def __str__(self) -> str:
        from .report import format_summary

        return format_summary(self.summary, self._root, self.path)


def load(path) -> Result:
    """The Result of a result file written before (complete, or incomplete: a run stopped or killed)."""
    return Result(path)


def _toml(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


def _open_group(path: Path, group: str):
    """xarray's Dataset of `group`, with each dimension's scale from the file's root as its coordinate."""
    import h5py
    import xarray as xr

    from .output import plain

    try:
        ds = xr.open_dataset(path, engine="h5netcdf", group=group)
    except OSError:  # a killed run's file, still marked open for writing: through SWMR's reader
        import h5netcdf
        from xarray.backends import H5NetCDFStore

        ds = xr.open_dataset(H5NetCDFStore(h5netcdf.File(path, "r", swmr=True), group=group))
    coords = {}
    with open_result_file(path) as f:
        for dim, size in ds.sizes.items():
            if dim not in ds.coords and dim in f and isinstance(f[dim], h5py.Dataset) and f[dim].shape == (size,):
                coords[dim] = f[dim][()]
        attrs = {k: plain(v) for k, v in f.attrs.items()
                 if k in ("machine", "scenario_name", "complete", "cycles_done", "seed", "threads")}
    ds = ds.assign_coords(coords)
    ds.attrs.update({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in attrs.items()})
    return ds

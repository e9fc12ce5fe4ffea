"""Sweeps: one scenario run at many points of its parameters, serially or through Dask
(docs/design.md, "Sweeps"; the file format is in docs/sweeps.md).

A sweep is a flat list of points, each an id, the overrides it applies to the base scenario and its
seed. `run_point` is the one pure function that runs a point, in this process or on a Dask worker:
it writes the point's own result file and returns the path and the summary row, never arrays.
`run_sweep` hands the points that are not yet complete to Dask (or runs them one after another),
collects the rows by point id and writes the summary table: the CSV as points finish, the CSV and
the HDF5 table at the end.

The parts: `spec` reads and validates the sweep file and expands it into its points (no Dask, no
h5py, nothing run); `execute` runs the points, serially or through a client, with their result
files, the folder lock, resuming and Ctrl-C; `cluster` starts or joins the Dask cluster (the one
module of meshsim that imports `distributed`); `table` writes the summary table and formats the
listings. This package re-exports the names the rest of meshsim and its users import.
"""

from .cluster import (
    StopOnInterrupt,
    dask_client,
    host_cores,
)
from .execute import (
    SweepInterrupted,
    SweepResult,
    format_points,
    format_result,
    point_status,
    row_of_file,
    run_point,
    run_sweep,
)
from .spec import (
    ID_LENGTH,
    MAX_POINTS,
    SEED_KEY,
    SEED_MODES,
    SWEEP_KEYS,
    TABLES,
    UNSWEPT,
    Point,
    Sweep,
    derive_seed,
    load_sweep,
    point_id,
)
from .table import (
    INFO_FIRST,
    INFO_LAST,
    table_columns,
    table_rows,
    write_summary,
)

__all__ = [
    "ID_LENGTH", "INFO_FIRST", "INFO_LAST", "MAX_POINTS", "SEED_KEY", "SEED_MODES", "SWEEP_KEYS", "TABLES", "UNSWEPT",
    "Point", "StopOnInterrupt", "Sweep", "SweepInterrupted", "SweepResult", "dask_client", "derive_seed",
    "format_points", "format_result", "host_cores", "load_sweep", "point_id", "point_status", "row_of_file",
    "run_point", "run_sweep", "table_columns", "table_rows", "write_summary",
]

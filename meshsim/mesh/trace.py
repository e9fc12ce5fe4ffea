"""Trace workloads: read injection events (cycle, row, col, work_cycles) from CSV or HDF5.

docs/mesh.md ("Workloads", workload `trace`): in cycle t, PE u is offered
one task per event with that cycle and position, in file order. A trace is validated like a
scenario: every problem found is collected (the first MAX_LISTED shown) into one InputError, each
naming the file, the line (CSV) or index (HDF5), the column, the bad value and what is allowed.

CSV: a header line with exactly the columns cycle,row,col,work_cycles in any order, then one event
per line; blank lines and lines starting with # are ignored. HDF5 (.h5, .hdf5): 1-D integer datasets
cycle, row, col and work_cycles of equal length at the file's root.

A trace file is a regular file of at most 2 GiB (meshsim.files, "trace file"). An HDF5 trace's
datasets are checked before any is read (docs/mesh.md, "Trace files"): each holds at most MAX_EVENTS
events, lives in the trace file itself, and declares no more bytes than its storage in the file
can hold (times the best ratio of its compression filters), so a file can make meshsim allocate at
most about 1,032 times its size, and never more than MAX_EVENTS events.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np

from .. import files
from ..errors import InputError

COLUMNS = ("cycle", "row", "col", "work_cycles")
HDF5_SUFFIXES = (".h5", ".hdf5")
MAX_LISTED = 20
MAX_WORK_CYCLES = 65535
_INT64_MAX = np.iinfo(np.int64).max
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_CHUNK_LINES = 1 << 16

#: The most events a trace may hold: what the largest CSV trace (2 GiB of 8-byte lines such as
#: "0,0,0,1") can hold. An HDF5 trace's datasets are checked against it before they are read.
MAX_EVENTS = 2**28

#: The best compression ratio (uncompressed bytes per stored byte) each HDF5 filter can reach, by
#: filter id; a filter not listed is refused. deflate (gzip): 258 bytes per match of 2 bits at best,
#: 1032:1. lzf: a back-reference of 3 bytes copies at most 264, 88:1. shuffle and fletcher32 do not
#: shrink data. nbit (None here): at least one bit per value, 8 x the item size. Others (szip,
#: scaleoffset, plugins) have no small bound, or none at all (scaleoffset stores a chunk of equal
#: values in a few bytes).
FILTER_RATIOS = {1: 1032, 32000: 88, 2: 1, 3: 1, 5: None}
_FILTER_NAMES = {1: "deflate (gzip)", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
                 32000: "lzf"}

#: The most bytes a compact dataset holds (HDF5 keeps it in its object header, of at most 64 KiB).
COMPACT_MAX_BYTES = 64 * 1024


def load_trace(path, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read and validate a trace for a rows x cols mesh (docs/mesh.md, "Workloads").

    Returns (cycle, unit, work), each of length n_events, sorted stably by (cycle, unit) so that
    events of the same cycle and PE keep their file order:
      cycle: int64, the cycle the task is offered (>= 0);
      unit: int64, the PE index row * cols + col;
      work: uint16, the task's work in cycles (1..65535).
    Raises InputError listing the problems (file, line or index, column, value, allowed range).
    """
    where = str(path)
    bounds = {
        "cycle": (0, _INT64_MAX, "must be an integer >= 0 and < 2^63"),
        "row": (0, rows - 1, f"must be an integer in [0, {rows - 1}] (machine.rows = {rows})"),
        "col": (0, cols - 1, f"must be an integer in [0, {cols - 1}] (machine.cols = {cols})"),
        "work_cycles": (1, MAX_WORK_CYCLES, f"must be an integer in [1, {MAX_WORK_CYCLES}]"),
    }
    allowed = {name: text for name, (_, _, text) in bounds.items()}
    if Path(path).suffix.lower() in HDF5_SUFFIXES:
        columns, position, parse_problems = _read_hdf5(path, where)
    else:
        columns, position, parse_problems = _read_csv(path, where, allowed)

    n_events = len(columns["cycle"][0])
    # Problems are (event index, column index, text without the position) so that parse and range
    # problems come out in file order; only the first MAX_LISTED are formatted.
    found = list(parse_problems)
    n_found = len(found)
    for j, name in enumerate(COLUMNS):
        values, overflow, raw = columns[name]
        lo, hi, text = bounds[name]
        bad = overflow | (values < lo) | (values > hi)
        n_bad = int(np.count_nonzero(bad))
        n_found += n_bad
        for i in np.flatnonzero(bad)[:MAX_LISTED]:
            found.append((int(i), j, f"{name} = {raw[i]}: {text}"))
    if n_found:
        found.sort(key=lambda item: (item[0], item[1]))
        lines = [f"{where}: {position(i)}: {text}" for i, _, text in found[:MAX_LISTED]]
        if n_found > MAX_LISTED:
            lines.append(f"{where}: ... and {n_found - MAX_LISTED} more problems")
        raise InputError(lines)
    if n_events == 0:
        raise InputError([f"{where}: the trace holds no events"])

    cycle = columns["cycle"][0]
    unit = columns["row"][0] * np.int64(cols) + columns["col"][0]
    work = columns["work_cycles"][0].astype(np.uint16)
    if n_events > 1:
        later = cycle[1:] > cycle[:-1]
        same = cycle[1:] == cycle[:-1]
        if not np.all(later | (same & (unit[1:] >= unit[:-1]))):
            # lexsort is stable and sorts by its last key first: cycle, then unit, then file order.
            order = np.lexsort((unit, cycle))
            cycle, unit, work = cycle[order], unit[order], work[order]
    return cycle, unit, work


# ---------------------------------------------------------------------------------------------
# CSV


def _read_csv(path, where: str, allowed: dict[str, str]):
    """Columns {name: (int64 values, overflow mask, raw values)}, position(i), parse problems."""
    data = files.read_bounded(path, where, "trace file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError([f"{where}: not UTF-8 text (bad byte at offset {e.start})"]) from None
    lines = text.splitlines()

    header_at = next((i for i, line in enumerate(lines) if not _is_skipped(line)), None)
    if header_at is None:
        raise InputError([
            f"{where}: empty trace file; expected a header line {','.join(COLUMNS)} and then one "
            "event per line"
        ])
    names = [name.strip() for name in lines[header_at].split(",")]
    header_problems = _check_header(names)
    if header_problems:
        found = lines[header_at].strip()
        raise InputError([
            f"{where}: line {header_at + 1}: header \"{found}\": {p}; expected exactly the columns "
            f"{','.join(COLUMNS)} (in any order)"
            for p in header_problems
        ])
    body = lines[header_at + 1:]
    order = [names.index(name) for name in COLUMNS]

    # numpy's C parser reads clean chunks; a chunk it rejects is parsed again line by line to name
    # every bad field. So a large trace with one bad line costs one slow chunk, not a slow file.
    tables, overflows, problems, too_big = [], [], [], {}
    n_events = 0
    for start in range(0, len(body), _CHUNK_LINES):
        part = body[start:start + _CHUNK_LINES]
        table = _fast_parse(part, len(names))
        if table is not None:
            table = table[:, order]
            overflow = np.zeros(table.shape, dtype=bool)
        else:
            table, overflow, part_problems, part_big = _slow_parse(part, names, order, allowed)
            problems.extend((n_events + e, j, text) for e, j, text in part_problems)
            too_big.update({(n_events + e, j): text for (e, j), text in part_big.items()})
        tables.append(table)
        overflows.append(overflow)
        n_events += len(table)
    table = np.concatenate(tables) if tables else np.zeros((0, len(COLUMNS)), dtype=np.int64)
    overflow = np.concatenate(overflows) if overflows else np.zeros(table.shape, dtype=bool)
    columns = {}
    for j, name in enumerate(COLUMNS):
        values = np.ascontiguousarray(table[:, j])
        raw = _RawValues(values, {e: text for (e, jj), text in too_big.items() if jj == j})
        columns[name] = (values, np.ascontiguousarray(overflow[:, j]), raw)
    line_of = _LazyLineNumbers(body, header_at + 1, n_events)
    return columns, (lambda i: f"line {line_of(i)}"), problems


def _is_skipped(line: str) -> bool:
    """Blank lines and comments carry no event."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _check_header(names: list[str]) -> list[str]:
    if all(_INTEGER.match(n) for n in names):
        return ["this looks like an event, not a header"]
    problems = []
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        problems.append("missing column" + ("s " if len(missing) > 1 else " ") + ", ".join(missing))
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        shown = ", ".join(f'"{n}"' for n in unknown)
        problems.append("unknown column" + ("s " if len(unknown) > 1 else " ") + shown)
    repeated = sorted({n for n in names if names.count(n) > 1 and n in COLUMNS})
    if repeated:
        plural = "s " if len(repeated) > 1 else " "
        problems.append("repeated column" + plural + ", ".join(repeated))
    return problems


def _fast_parse(body: list[str], n_columns: int):
    """The events as an int64 (n, n_columns) array via numpy's C parser, or None on any doubt.

    None sends the file to the slow parser, which finds and names every bad line; errors are the
    rare case, so only they pay for Python-level parsing.
    """
    try:
        with warnings.catch_warnings():
            # A header with no events is reported by load_trace, not as a numpy warning.
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(body, delimiter=",", comments="#", dtype=np.int64, ndmin=2)
    except (ValueError, OverflowError):
        return None
    if table.shape[0] == 0:
        return np.zeros((0, n_columns), dtype=np.int64)
    if table.shape[1] != n_columns:
        return None
    return table


class _LazyLineNumbers:
    """Maps an event index to its 1-based line number, computed only when a problem needs it."""

    def __init__(self, body: list[str], first_line_index: int, n_events: int):
        self._body = body
        self._first = first_line_index
        self._n_events = n_events
        self._numbers = None

    def __call__(self, i: int) -> int:
        if self._numbers is None:
            self._numbers = [
                self._first + k + 1 for k, line in enumerate(self._body) if _has_event(line)
            ]
            # loadtxt and _slow_parse must agree on which lines hold events, or numbers lie.
            assert len(self._numbers) == self._n_events, (len(self._numbers), self._n_events)
        return self._numbers[i]


def _has_event(line: str) -> bool:
    """Whether a body line holds an event: anything left before a '#' comment."""
    return bool(line.split("#", 1)[0].strip())


def _slow_parse(part: list[str], names: list[str], order: list[int], allowed: dict[str, str]):
    """Parse line by line: an int64 (n, 4) table in COLUMNS order, its overflow mask, problems
    as (event, column index, text), and {(event, column index): text} of integers too big for
    int64 (reported with the range problems)."""
    n_columns = len(names)
    # A bad field gets a value that passes the range checks, so it is reported once.
    placeholder = [0, 0, 0, 1]
    events = []
    too_big = {}
    problems = []
    for line in part:
        if not _has_event(line):
            continue
        event = len(events)
        fields = [f.strip() for f in line.split("#", 1)[0].split(",")]
        if len(fields) != n_columns:
            problems.append((
                event, -1,
                f"expected {n_columns} comma-separated fields ({','.join(names)}), "
                f"found {len(fields)}",
            ))
            events.append(list(placeholder))
            continue
        parsed = []
        for j, (name, col) in enumerate(zip(COLUMNS, order, strict=False)):
            field = fields[col]
            if not _INTEGER.match(field):
                problems.append((event, j, f'{name} = "{field}": {allowed[name]}'))
                parsed.append(placeholder[j])
                continue
            value = int(field)
            if not (-_INT64_MAX - 1 <= value <= _INT64_MAX):
                too_big[(event, j)] = field
                value = placeholder[j]
            parsed.append(value)
        events.append(parsed)
    table = np.array(events, dtype=np.int64).reshape(len(events), len(COLUMNS))
    overflow = np.zeros(table.shape, dtype=bool)
    for event, j in too_big:
        overflow[event, j] = True
    return table, overflow, problems, too_big


class _RawValues:
    """The values as written, for messages: the parsed integers, except where they overflowed."""

    def __init__(self, values: np.ndarray, overrides: dict):
        self.values = values
        self.overrides = overrides

    def __getitem__(self, i):
        return self.overrides.get(int(i), self.values[i])


# ---------------------------------------------------------------------------------------------
# HDF5


def _read_hdf5(path, where: str):
    """Columns {name: (int64 values, overflow mask, raw values)}, position(i), parse problems."""
    import h5py  # Imported here so CSV traces and scenario checks do not pay for it.

    checked = files.check_regular(path, where, "trace file")  # before h5py opens it: no FIFO or device
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise InputError([f"{where}: cannot read as HDF5 ({e})"]) from None
    try:
        with f:
            problems, arrays = _read_columns(f, checked, where)
    except InputError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:  # a damaged file's structure
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError([f"{where}: cannot read as a trace: the HDF5 file is damaged ({first})"]) from None
    if not problems:
        lengths = {name: len(a) for name, a in arrays.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{n} {k}" for n, k in lengths.items())
            problems.append(f"{where}: the datasets must have equal lengths; they have {shown}")
    if problems:
        raise InputError(problems)
    return _columns_of(arrays)


def _read_columns(f, checked, where: str) -> tuple[list, dict]:
    """(problems, {column: array}) of an open HDF5 trace: each dataset checked before it is read."""
    import h5py

    problems = []
    arrays = {}
    file_size = _opened_size(f, checked, where)
    datasets = {}
    for name in COLUMNS:
        # The link is looked at before the object is opened: opening an external link would
        # open another file, unchecked.
        problem = _link_problem(f, name, where)
        if problem:
            problems.append(problem)
            continue
        obj = f[name]
        if not isinstance(obj, h5py.Dataset):
            problems.append(f'{where}: "{name}" is a group; it must be a 1-D integer dataset')
            continue
        if obj.ndim != 1:
            problems.append(f'{where}: dataset "{name}" has shape {obj.shape}; it must be 1-D')
            continue
        if obj.dtype.kind not in "iu":
            problems.append(
                f'{where}: dataset "{name}" has type {obj.dtype}; it must hold integers'
            )
            continue
        problem = _size_problem(obj, name, where, file_size)
        if problem:
            problems.append(problem)
            continue
        datasets[name] = obj
    if not problems:
        for name, obj in datasets.items():
            try:
                arrays[name] = obj[()]
            except OSError as e:
                raise InputError([f'{where}: cannot read dataset "{name}" ({e})']) from None
    return problems, arrays


def _columns_of(arrays: dict):
    """The trace's columns (int64 values, overflow mask, raw values), position(i), no problems."""
    columns = {}
    for name in COLUMNS:
        a = arrays[name]
        if a.dtype.kind == "u" and a.dtype.itemsize == 8:
            # uint64 beyond int64 would wrap negative; flag it and keep the original for messages.
            overflow = a > np.uint64(_INT64_MAX)
            values = np.where(overflow, np.uint64(0), a).astype(np.int64)
        else:
            overflow = np.zeros(len(a), dtype=bool)
            values = a.astype(np.int64, copy=False)
        columns[name] = (values, overflow, a)
    return columns, (lambda i: f"index {i}"), []


def _opened_size(f, checked, where: str) -> int:
    """The size of the file h5py opened, which must be the regular file checked before."""
    try:
        st = os.fstat(f.id.get_vfd_handle())
    except (OSError, ValueError, TypeError):  # a driver without a descriptor: the checked stat
        return checked.st_size
    if (st.st_dev, st.st_ino) != (checked.st_dev, checked.st_ino):
        raise InputError([f"{where}: was replaced while it was opened; a trace file must stay as it is while "
                          "meshsim reads it"])
    limit = files.LIMITS["trace file"]
    if st.st_size > limit:
        raise InputError([f"{where}: {st.st_size:,} bytes; a trace file may be at most {files.size_text(limit)}"])
    return st.st_size


def _link_problem(f, name: str, where: str) -> str | None:
    """Why the root's link `name` cannot be a trace dataset (missing, a link to another file, or a
    soft link through anything but hard links), or None. Nothing is opened on the way."""
    import h5py

    def link_type(group_id, part: str):
        part = part.encode()
        return group_id.links.get_info(part).type if group_id.links.exists(part) else None

    needs = f"a trace needs the 1-D integer datasets {', '.join(COLUMNS)}"
    elsewhere = "a trace's datasets must be stored in the trace file itself"
    kind = link_type(f.id, name)
    if kind is None:
        return f'{where}: missing dataset "{name}"; {needs}'
    if kind == h5py.h5l.TYPE_HARD:
        return None
    if kind == h5py.h5l.TYPE_EXTERNAL:
        filename, target = (b.decode(errors="replace") for b in f.id.links.get_val(name.encode()))
        return f'{where}: "{name}" is a link to "{target}" in another file ({filename}); {elsewhere}'
    if kind != h5py.h5l.TYPE_SOFT:
        return f'{where}: "{name}" is a user-defined link; {elsewhere}'
    target = f.id.links.get_val(name.encode()).decode(errors="replace")
    parts = [p for p in target.split("/") if p and p != "."]
    group = f.id
    for k, part in enumerate(parts):
        kind = link_type(group, part)
        if kind is None:
            return f'{where}: "{name}" is a soft link to "{target}", which is missing; {needs}'
        if kind != h5py.h5l.TYPE_HARD:
            return (f'{where}: "{name}" is a soft link to "{target}", which passes through another link; '
                    f"{elsewhere}, as a dataset or a soft link through groups")
        if k < len(parts) - 1:
            inner = f["/" + "/".join(parts[:k + 1])]  # hard links only so far: in this file
            if not isinstance(inner, h5py.Group):
                return f'{where}: "{name}" is a soft link to "{target}", which is missing; {needs}'
            group = inner.id
    return None


def _size_problem(obj, name: str, where: str, file_size: int) -> str | None:
    """Why reading the dataset `obj` could ask for more memory than its file holds, or None
    (docs/mesh.md, "Trace files")."""
    import h5py

    n = int(obj.shape[0])
    itemsize = obj.dtype.itemsize
    declared = n * itemsize
    says = f'{where}: dataset "{name}" declares {n:,} events ({declared:,} bytes)'
    if n > MAX_EVENTS:
        return f"{says}; a trace may hold at most {MAX_EVENTS:,} events"
    dsid = obj.id
    dcpl = dsid.get_create_plist()
    layout = dcpl.get_layout()
    elsewhere = "a trace's datasets must be stored in the trace file itself"
    if layout == h5py.h5d.VIRTUAL:
        return f"{says} as a virtual dataset, whose data lies in other datasets or files; {elsewhere}"
    if dcpl.get_external_count() > 0:
        return f"{says} stored in external files; {elsewhere}"
    storage = int(dsid.get_storage_size())
    if layout == h5py.h5d.COMPACT:
        if declared > COMPACT_MAX_BYTES:
            return f"{says} as a compact dataset; a compact dataset holds at most {COMPACT_MAX_BYTES:,} bytes"
        return None
    if layout == h5py.h5d.CONTIGUOUS:
        if declared == 0:
            return None
        offset = dsid.get_offset()
        if offset is None or storage < declared:
            return (f"{says} but only {storage:,} bytes of it are written in the file; every byte a dataset "
                    "declares must be written")
        end = offset + storage  # the offset is the file's own, user block included
        if end > file_size:
            return (f"{says} stored at bytes {offset:,} to {end:,}, beyond the end of the file "
                    f"({file_size:,} bytes); a dataset's bytes must lie within the file")
        return None
    if layout != h5py.h5d.CHUNKED:
        return f"{says} in an unknown storage layout ({layout}); {elsewhere}, contiguous, chunked or compact"
    chunk = int(dcpl.get_chunk()[0])
    n_chunks = -(-n // chunk)
    written = int(dsid.get_num_chunks()) if n_chunks else 0
    if written < n_chunks:
        return (f"{says} in {n_chunks:,} chunks of which {written:,} are written; every chunk a dataset "
                "declares must be written")
    ratio, names = 1, []
    for i in range(dcpl.get_nfilters()):
        code = dcpl.get_filter(i)[0]
        label = _FILTER_NAMES.get(code, f"filter {code}")
        if code not in FILTER_RATIOS:
            allowed = [_FILTER_NAMES[c] for c in FILTER_RATIOS]
            return (f"{says} compressed with {label}, which has no small bound on its compression ratio; a "
                    f"trace's datasets may use only the filters {', '.join(allowed[:-1])} and {allowed[-1]}")
        bound = FILTER_RATIOS[code]
        ratio *= 8 * itemsize if bound is None else bound
        names.append(label)
    if storage > file_size:
        return (f"{says} whose chunks claim {storage:,} bytes, more than the file's {file_size:,}; a dataset's "
                "bytes must lie within the file")
    whole = n_chunks * chunk * itemsize  # what its chunks hold decompressed, an edge chunk in full
    if whole > storage * ratio:
        how = f"compressed with {' and '.join(names)}, at most {ratio:,}:1" if names else "uncompressed"
        return (f"{says}, {whole:,} bytes in whole chunks, stored in {storage:,} bytes of the file ({how}); it may "
                f"declare at most {storage * ratio:,} bytes")
    return None

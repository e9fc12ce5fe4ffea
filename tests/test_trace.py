"""Trace files: CSV and HDF5 injection events (docs/mesh.md, "Workloads").

Every bad-input test asserts on the message: the file, the line or index, the column, the bad value
and the allowed range.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from meshsim.errors import InputError
from meshsim.mesh.trace import COLUMNS, MAX_EVENTS, MAX_LISTED, load_trace

ROOT = Path(__file__).resolve().parents[1]

HEADER = "cycle,row,col,work_cycles\n"


def write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def write_h5(tmp_path, name="t.h5", **datasets):
    path = tmp_path / name
    with h5py.File(path, "w") as f:
        for key, value in datasets.items():
            f[key] = value
    return path


def problems_of(path, rows=4, cols=5):
    with pytest.raises(InputError) as caught:
        load_trace(path, rows, cols)
    return caught.value.problems


# ---------------------------------------------------------------------------------------------
# Good traces


def test_csv_events_come_back_sorted_by_cycle_then_unit_keeping_file_order_in_ties(tmp_path):
    path = write(
        tmp_path,
        "# a comment before the header\n"
        + HEADER
        + "5,1,2,30\n"  # unit 7
        + "5,0,0,10\n"  # unit 0
        + "\n# a comment among events\n"
        + "0,3,4,1\n"  # unit 19
        + "5,0,0,11\n",  # unit 0 again: after the first one at cycle 5
    )
    cycle, unit, work = load_trace(path, rows=4, cols=5)
    assert cycle.dtype == np.int64 and unit.dtype == np.int64 and work.dtype == np.uint16
    assert cycle.tolist() == [0, 5, 5, 5]
    assert unit.tolist() == [19, 0, 0, 7]
    assert work.tolist() == [1, 10, 11, 30]


def test_csv_columns_may_come_in_any_order_with_spaces(tmp_path):
    path = write(tmp_path, " work_cycles , col,row ,cycle\n 7 , 1, 2 , 3\n65535,0,0,0\n")
    cycle, unit, work = load_trace(path, rows=4, cols=5)
    assert cycle.tolist() == [0, 3]
    assert unit.tolist() == [0, 2 * 5 + 1]
    assert work.tolist() == [65535, 7]


def test_csv_with_whitespace_only_lines_and_trailing_comments_is_read(tmp_path):
    path = write(tmp_path, HEADER + "1,1,1,1   # first\n   \n2,2,2,2\n")
    cycle, unit, work = load_trace(path, rows=4, cols=5)
    assert cycle.tolist() == [1, 2]
    assert unit.tolist() == [6, 12]
    assert work.tolist() == [1, 2]


def test_a_large_csv_reads_every_event(tmp_path):
    n = 200_000
    rng = np.random.default_rng(0)
    events = np.stack(
        [rng.integers(0, 1000, n), rng.integers(0, 4, n), rng.integers(0, 5, n),
         rng.integers(1, 100, n)],
        axis=1,
    )
    path = tmp_path / "big.csv"
    with open(path, "w") as f:
        f.write(HEADER)
        np.savetxt(f, events, fmt="%d", delimiter=",")
    cycle, unit, work = load_trace(path, rows=4, cols=5)
    order = np.lexsort((events[:, 1] * 5 + events[:, 2], events[:, 0]))
    assert np.array_equal(cycle, events[order, 0])
    assert np.array_equal(unit, (events[:, 1] * 5 + events[:, 2])[order])
    assert np.array_equal(work, events[order, 3].astype(np.uint16))


def test_hdf5_events_come_back_sorted_like_csv(tmp_path):
    path = write_h5(
        tmp_path,
        cycle=np.array([5, 5, 0, 5], dtype=np.uint32),
        row=np.array([1, 0, 3, 0], dtype=np.int16),
        col=np.array([2, 0, 4, 0], dtype=np.int64),
        work_cycles=np.array([30, 10, 1, 11], dtype=np.uint16),
    )
    cycle, unit, work = load_trace(path, rows=4, cols=5)
    assert cycle.tolist() == [0, 5, 5, 5]
    assert unit.tolist() == [19, 0, 0, 7]
    assert work.tolist() == [1, 10, 11, 30]
    assert work.dtype == np.uint16 and unit.dtype == np.int64


# ---------------------------------------------------------------------------------------------
# Bad CSV


def test_csv_range_problems_name_line_column_value_and_range(tmp_path):
    path = write(tmp_path, HEADER + "0,0,0,1\n-1,4,5,0\n3,0,0,65536\n")
    assert problems_of(path) == [
        f"{path}: line 3: cycle = -1: must be an integer >= 0 and < 2^63",
        f"{path}: line 3: row = 4: must be an integer in [0, 3] (machine.rows = 4)",
        f"{path}: line 3: col = 5: must be an integer in [0, 4] (machine.cols = 5)",
        f"{path}: line 3: work_cycles = 0: must be an integer in [1, 65535]",
        f"{path}: line 4: work_cycles = 65536: must be an integer in [1, 65535]",
    ]


def test_csv_non_integer_fields_and_short_lines_are_reported_with_range_problems(tmp_path):
    path = write(
        tmp_path,
        "# header follows\n" + HEADER + "1.5,0,0,1\n0,x,0,1\n0,0,0\n0,9,0,1\n"
        "99999999999999999999,0,0,1\n",
    )
    assert problems_of(path) == [
        f'{path}: line 3: cycle = "1.5": must be an integer >= 0 and < 2^63',
        f'{path}: line 4: row = "x": must be an integer in [0, 3] (machine.rows = 4)',
        f"{path}: line 5: expected 4 comma-separated fields (cycle,row,col,work_cycles), found 3",
        f"{path}: line 6: row = 9: must be an integer in [0, 3] (machine.rows = 4)",
        f"{path}: line 7: cycle = 99999999999999999999: must be an integer >= 0 and < 2^63",
    ]


def test_bad_lines_far_into_a_large_csv_get_their_own_line_numbers(tmp_path):
    lines = ["0,0,0,1"] * 150_000
    lines[5] = "0,0,7,1"
    lines[140_000] = "0,0,0,zero"
    path = write(tmp_path, "#c\n" + HEADER + "\n".join(lines) + "\n")
    assert problems_of(path) == [
        f"{path}: line 8: col = 7: must be an integer in [0, 4] (machine.cols = 5)",
        f'{path}: line 140003: work_cycles = "zero": must be an integer in [1, 65535]',
    ]


def test_only_the_first_problems_are_listed_then_a_count(tmp_path):
    path = write(tmp_path, HEADER + "0,9,0,1\n" * (MAX_LISTED + 7))
    problems = problems_of(path)
    assert len(problems) == MAX_LISTED + 1
    assert problems[0] == (
        f"{path}: line 2: row = 9: must be an integer in [0, 3] (machine.rows = 4)"
    )
    assert problems[MAX_LISTED - 1].startswith(f"{path}: line {MAX_LISTED + 1}: row = 9")
    assert problems[-1] == f"{path}: ... and 7 more problems"


def test_csv_header_problems_name_the_missing_unknown_and_repeated_columns(tmp_path):
    path = write(tmp_path, "cycle,row,row,work,work_cycles\n0,0,0,0,1\n")
    problems = problems_of(path)
    expected = "expected exactly the columns cycle,row,col,work_cycles (in any order)"
    assert problems == [
        f'{path}: line 1: header "cycle,row,row,work,work_cycles": missing column col; {expected}',
        f'{path}: line 1: header "cycle,row,row,work,work_cycles": unknown column "work"; '
        f"{expected}",
        f'{path}: line 1: header "cycle,row,row,work,work_cycles": repeated column row; '
        f"{expected}",
    ]


def test_a_csv_without_a_header_says_so(tmp_path):
    path = write(tmp_path, "0,0,0,1\n")
    assert problems_of(path) == [
        f'{path}: line 1: header "0,0,0,1": this looks like an event, not a header; expected '
        "exactly the columns cycle,row,col,work_cycles (in any order)"
    ]


def test_an_empty_csv_and_a_header_without_events_are_errors(tmp_path):
    empty = write(tmp_path, "# nothing\n\n", name="empty.csv")
    assert problems_of(empty) == [
        f"{empty}: empty trace file; expected a header line cycle,row,col,work_cycles and then "
        "one event per line"
    ]
    header_only = write(tmp_path, HEADER + "# no events\n", name="header.csv")
    assert problems_of(header_only) == [f"{header_only}: the trace holds no events"]


def test_a_missing_or_undecodable_trace_file_is_reported(tmp_path):
    missing = tmp_path / "nope.csv"
    assert problems_of(missing) == [f"{missing}: no such trace file"]
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"cycle,row,col,work_cycles\n\xff\xfe\n")
    assert problems_of(binary) == [f"{binary}: not UTF-8 text (bad byte at offset 26)"]


# ---------------------------------------------------------------------------------------------
# Bad HDF5


def test_hdf5_range_problems_name_index_column_value_and_range(tmp_path):
    path = write_h5(
        tmp_path,
        cycle=np.array([0, 2**64 - 1, 3], dtype=np.uint64),
        row=np.array([0, 0, -2]),
        col=np.array([0, 0, 0]),
        work_cycles=np.array([1, 1, 0]),
    )
    assert problems_of(path) == [
        f"{path}: index 1: cycle = 18446744073709551615: must be an integer >= 0 and < 2^63",
        f"{path}: index 2: row = -2: must be an integer in [0, 3] (machine.rows = 4)",
        f"{path}: index 2: work_cycles = 0: must be an integer in [1, 65535]",
    ]


def test_hdf5_missing_misshapen_and_non_integer_datasets_are_reported(tmp_path):
    path = write_h5(
        tmp_path,
        cycle=np.array([[0, 1]]),
        row=np.array([0.0, 1.0]),
        work_cycles=np.array([1, 2]),
    )
    assert problems_of(path) == [
        f"{path}: dataset \"cycle\" has shape (1, 2); it must be 1-D",
        f"{path}: dataset \"row\" has type float64; it must hold integers",
        f"{path}: missing dataset \"col\"; a trace needs the 1-D integer datasets "
        "cycle, row, col, work_cycles",
    ]


def test_hdf5_datasets_of_different_lengths_are_reported(tmp_path):
    path = write_h5(
        tmp_path,
        cycle=np.array([0, 1]),
        row=np.array([0]),
        col=np.array([0, 0]),
        work_cycles=np.array([1, 2]),
    )
    assert problems_of(path) == [
        f"{path}: the datasets must have equal lengths; they have "
        "cycle 2, row 1, col 2, work_cycles 2"
    ]


def test_a_file_that_is_not_hdf5_is_reported(tmp_path):
    path = write(tmp_path, "not hdf5", name="t.hdf5")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}: cannot read as HDF5 (")


def test_an_hdf5_trace_with_no_events_is_an_error(tmp_path):
    empty = np.zeros(0, dtype=np.int64)
    path = write_h5(tmp_path, cycle=empty, row=empty, col=empty, work_cycles=empty)
    assert problems_of(path) == [f"{path}: the trace holds no events"]


# ---------------------------------------------------------------------------------------------
# What a trace may be: a bounded regular file, and HDF5 datasets no larger than their storage
# (docs/mesh.md, "Trace files")

# Loads each trace path given in a fresh process, under an address-space limit of what the process
# already uses plus 1 GiB: a trace that made meshsim allocate its declared size would fail there
# with MemoryError rather than strain the machine. Prints one JSON line per path.
CHILD = """
import json, resource, sys
import h5py, numpy
from meshsim.errors import InputError
from meshsim.mesh.trace import load_trace

try:
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
except (OSError, StopIteration, ValueError):  # no /proc: no limit (the test that needs it is skipped)
    pass
for path in sys.argv[1:]:
    try:
        print(json.dumps({"events": len(load_trace(path, 4, 5)[0])}), flush=True)
    except InputError as e:
        print(json.dumps({"problems": e.problems}), flush=True)
"""


def load_in_a_child(*paths):
    """load_trace(path, 4, 5) of each path in a fresh, memory-limited process: its event count or its
    problems. A load that blocks fails the test when the generous timeout ends instead of hanging it."""
    p = subprocess.run([sys.executable, "-c", CHILD, *map(str, paths)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def write_h5_with(tmp_path, name, make):
    """An HDF5 trace whose dataset cycle is made by make(file, "cycle") and the others hold 4 good
    events."""
    path = tmp_path / name
    with h5py.File(path, "w") as f:
        make(f, "cycle")
        for key in COLUMNS[1:]:
            f[key] = np.ones(4, dtype=np.int64)
    return path


def unwritten(n, chunk=2**16):
    return lambda f, key: f.create_dataset(key, shape=(n,), dtype=np.int64, chunks=(chunk,))


def tiny_compressed(n, chunk=2**24):
    """n events declared in deflate chunks of 16 stored bytes each: far beyond 1032:1."""
    def make(f, key):
        d = f.create_dataset(key, shape=(n,), dtype=np.int64, chunks=(chunk,), compression="gzip")
        for start in range(0, n, chunk):
            d.id.write_direct_chunk((start,), b"\0" * 16)
    return make


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the address-space limit reads /proc")
def test_hdf5_headers_declaring_billions_of_events_are_refused_without_allocating_them(tmp_path):
    bomb = tmp_path / "bomb.h5"  # a few KB declaring 2^32 events per column, nothing written
    with h5py.File(bomb, "w") as f:
        for key in COLUMNS:
            unwritten(2**32)(f, key)
    packed = write_h5_with(tmp_path, "packed.h5", tiny_compressed(2**28))  # within MAX_EVENTS
    assert bomb.stat().st_size < 10_000 and packed.stat().st_size < 100_000
    bomb_result, packed_result = load_in_a_child(bomb, packed)
    assert bomb_result["problems"] == [
        f'{bomb}: dataset "{key}" declares 4,294,967,296 events (34,359,738,368 bytes); a trace may hold at most '
        "268,435,456 events" for key in COLUMNS
    ]
    assert packed_result["problems"] == [
        f'{packed}: dataset "cycle" declares 268,435,456 events (2,147,483,648 bytes), 2,147,483,648 bytes in whole '
        "chunks, stored in 256 bytes of the file (compressed with deflate (gzip), at most 1,032:1); it may declare "
        "at most 264,192 bytes"
    ]
    assert MAX_EVENTS == 2**28


def test_a_trace_header_of_2_32_events_is_refused_by_validate_as_a_user_meets_it(tmp_path):
    """meshsim validate on a scenario whose trace is such a file: exit 2, the problem, no traceback."""
    with h5py.File(tmp_path / "bomb.h5", "w") as f:
        for key in COLUMNS:
            unwritten(2**32)(f, key)
    (tmp_path / "tr.toml").write_text('[machine]\nrows = 4\ncols = 4\n[workload]\ntype = "trace"\n'
                                      'trace_file = "bomb.h5"\n')
    p = subprocess.run([sys.executable, "-m", "meshsim", "validate", "tr.toml"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert ('bomb.h5: dataset "cycle" declares 4,294,967,296 events (34,359,738,368 bytes); a trace may hold at '
            "most 268,435,456 events") in p.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_devices_and_links_to_them_are_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo.csv")  # no writer ever opens it: opening it to read would block
    os.mkfifo(tmp_path / "fifo.h5")
    (tmp_path / "zero.h5").symlink_to("/dev/zero")
    outside = write_h5_with(tmp_path, "outside.h5",
                            lambda f, key: f.__setitem__(key, h5py.ExternalLink(str(tmp_path / "fifo.h5"), "/x")))
    results = load_in_a_child(tmp_path / "fifo.csv", tmp_path / "fifo.h5", "/dev/zero", tmp_path / "zero.h5",
                              outside)
    assert results == [
        {"problems": [f"{tmp_path / 'fifo.csv'}: is a FIFO (named pipe); a trace file must be a regular file"]},
        {"problems": [f"{tmp_path / 'fifo.h5'}: is a FIFO (named pipe); a trace file must be a regular file"]},
        {"problems": ["/dev/zero: is a character device; a trace file must be a regular file"]},
        {"problems": [f"{tmp_path / 'zero.h5'}: is a character device; a trace file must be a regular file"]},
        {"problems": [f'{outside}: "cycle" is a link to "/x" in another file ({tmp_path / "fifo.h5"}); a trace\'s '
                      "datasets must be stored in the trace file itself"]},
    ]


def test_a_folder_given_as_the_trace_is_refused(tmp_path):
    assert problems_of(tmp_path) == [f"{tmp_path}: is a folder; a trace file must be a regular file"]


def test_hdf5_datasets_whose_chunks_or_bytes_are_not_written_are_refused(tmp_path):
    chunked = write_h5_with(tmp_path, "chunked.h5", unwritten(2**20))
    assert problems_of(chunked) == [
        f'{chunked}: dataset "cycle" declares 1,048,576 events (8,388,608 bytes) in 16 chunks of which 0 are '
        "written; every chunk a dataset declares must be written"
    ]

    def half_written(f, key):
        f.create_dataset(key, shape=(2**20,), dtype=np.int64, chunks=(2**16,))[: 2**19] = 1

    half = write_h5_with(tmp_path, "half.h5", half_written)
    assert problems_of(half) == [
        f'{half}: dataset "cycle" declares 1,048,576 events (8,388,608 bytes) in 16 chunks of which 8 are '
        "written; every chunk a dataset declares must be written"
    ]
    contiguous = write_h5_with(tmp_path, "contiguous.h5",
                               lambda f, key: f.create_dataset(key, shape=(2**20,), dtype=np.int64))
    assert problems_of(contiguous) == [
        f'{contiguous}: dataset "cycle" declares 1,048,576 events (8,388,608 bytes) but only 0 bytes of it are '
        "written in the file; every byte a dataset declares must be written"
    ]


def test_hdf5_datasets_compressed_beyond_their_filters_ratio_or_with_unbounded_filters_are_refused(tmp_path):
    packed = write_h5_with(tmp_path, "packed.h5", tiny_compressed(2**20, chunk=2**20))
    assert problems_of(packed) == [
        f'{packed}: dataset "cycle" declares 1,048,576 events (8,388,608 bytes), 8,388,608 bytes in whole chunks, '
        "stored in 16 bytes of the file (compressed with deflate (gzip), at most 1,032:1); it may declare at most "
        "16,512 bytes"
    ]
    scaled = write_h5_with(tmp_path, "scaled.h5",
                           lambda f, key: f.create_dataset(key, data=np.zeros(4, dtype=np.int64), scaleoffset=0))
    assert problems_of(scaled) == [
        f'{scaled}: dataset "cycle" declares 4 events (32 bytes) compressed with scaleoffset, which has no small '
        "bound on its compression ratio; a trace's datasets may use only the filters deflate (gzip), lzf, shuffle, "
        "fletcher32 and nbit"
    ]


def test_hdf5_datasets_kept_in_other_files_are_refused(tmp_path):
    other = write_h5(tmp_path, "other.h5", x=np.zeros(4, dtype=np.int64))
    linked = write_h5_with(tmp_path, "linked.h5",
                           lambda f, key: f.__setitem__(key, h5py.ExternalLink(str(other), "/x")))
    assert problems_of(linked) == [
        f'{linked}: "cycle" is a link to "/x" in another file ({other}); a trace\'s datasets must be stored in the '
        "trace file itself"
    ]

    def through(f, key):
        f["elsewhere"] = h5py.ExternalLink(str(other), "/x")
        f[key] = h5py.SoftLink("/elsewhere")

    soft = write_h5_with(tmp_path, "soft.h5", through)
    assert problems_of(soft) == [
        f'{soft}: "cycle" is a soft link to "/elsewhere", which passes through another link; a trace\'s datasets '
        "must be stored in the trace file itself, as a dataset or a soft link through groups"
    ]
    external = write_h5_with(tmp_path, "external.h5", lambda f, key: f.create_dataset(
        key, shape=(4,), dtype=np.int64, external=[(str(other), 0, 32)]))
    assert problems_of(external) == [
        f'{external}: dataset "cycle" declares 4 events (32 bytes) stored in external files; a trace\'s datasets '
        "must be stored in the trace file itself"
    ]


def test_compressed_chunked_compact_and_soft_linked_hdf5_traces_still_load(tmp_path):
    """What h5py writes, in every layout and filter allowed, loads as before."""
    n = 100_003  # an edge chunk not full
    rng = np.random.default_rng(1)
    data = {"cycle": rng.integers(0, 50, n), "row": rng.integers(0, 4, n), "col": rng.integers(0, 5, n),
            "work_cycles": rng.integers(1, 9, n).astype(np.uint16)}
    expected = load_trace(write_h5(tmp_path, "plain.h5", **data), 4, 5)
    layouts = {
        "gzip": dict(compression="gzip", shuffle=True, fletcher32=True, chunks=(4096,)),
        "lzf": dict(compression="lzf", chunks=(10_000,)),
        "chunked": dict(chunks=(30_000,), maxshape=(None,)),
    }
    for label, options in layouts.items():
        path = tmp_path / f"{label}.h5"
        with h5py.File(path, "w", userblock_size=512 if label == "gzip" else 0) as f:
            for key, value in data.items():
                f.create_dataset(key, data=value, **options)
        assert all(np.array_equal(a, b) for a, b in zip(load_trace(path, 4, 5), expected, strict=True)), label

    small = {key: value[:100] for key, value in data.items()}
    compact = tmp_path / "compact.h5"
    with h5py.File(compact, "w") as f:
        for key, value in small.items():
            space = h5py.h5s.create_simple(value.shape)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            tid = h5py.h5t.py_create(value.dtype)
            h5py.h5d.create(f.id, key.encode(), tid, space, dcpl=dcpl).write(h5py.h5s.ALL, h5py.h5s.ALL,
                                                                               np.ascontiguousarray(value))
        assert f["cycle"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT
    soft = tmp_path / "soft.h5"
    with h5py.File(soft, "w") as f:
        for key, value in small.items():
            f[f"events/{key}"] = value
            f[key] = h5py.SoftLink(f"/events/{key}")
    expected_small = load_trace(write_h5(tmp_path, "small.h5", **small), 4, 5)
    for path in (compact, soft):
        assert all(np.array_equal(a, b) for a, b in zip(load_trace(path, 4, 5), expected_small, strict=True)), path

"""Trace files: CSV and HDF5 injection events (docs/mesh.md, "Workloads").

Every bad-input test asserts on the message: the file, the line or index, the column, the bad value
and the allowed range.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from meshsim.errors import InputError
from meshsim.mesh.trace import MAX_LISTED, load_trace

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

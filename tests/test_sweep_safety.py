"""What a sweep may do to the files it is pointed at (meshsim/files.py; docs/sweeps.md, "What a
sweep writes"): the scheduler file is read once and the address checked is the address connected
to; the results folder, its lock, the summary tables, their temporary names and the points' files
are written, renamed and removed only as regular files, and anything else at those names is
refused before anything runs; a rerun keeps the run times of the points it skips."""

import csv
import os
from pathlib import Path

import h5py
import pytest

from meshsim import files
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.sweep import load_sweep, point_status, run_sweep, write_summary

BASE = """
[run]
cycles = 100
seed = 5
window_cycles = 50
[machine]
rows = 8
cols = 8
queue_capacity = 6
[migration]
policy = "least_loaded"
threshold = 2
[workload]
type = "skewed"
injection_rate = 0.1
sigma = 1.0
[output]
frame_every_cycles = 50
flush_every_cycles = 50
"""


def write(tmp_path, text, name="s.toml"):
    (tmp_path / "base.toml").write_text(BASE)
    path = tmp_path / name
    path.write_text(text)
    return path


def sweep_in(tmp_path, out, grid="migration.threshold = [1, 2]"):
    return load_sweep(write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{out}"\n[grid]\n{grid}\n'))


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def refused(sweep) -> list:
    with pytest.raises(InputError) as e:
        run_sweep(sweep)
    return e.value.problems


def says(message: str, path, kind: str, what: str) -> bool:
    """Whether a refusal names the path, what is there and what meshsim would have written
    (meshsim.files words the rest)."""
    return message.startswith(f"{path}: is {kind}") and f" {what}" in message


# ---------------------------------------------------------------------------------------------
# The scheduler file


@pytest.fixture
def no_connection(monkeypatch):
    """distributed.Client replaced: it records the address it is given and refuses to connect."""
    import distributed

    tried = []

    def client(address=None, **kw):
        tried.append((address, kw.get("scheduler_file")))
        raise OSError("connection refused")

    monkeypatch.setattr(distributed, "Client", client)
    return tried


@pytest.fixture
def swapped_after_reading(monkeypatch):
    """files.read_bounded, but a scheduler file is rewritten with other contents right after it is
    read: whatever reads it again sees them. Returns the count of its reads, and what to write."""
    real = files.read_bounded
    state = {"reads": 0, "then": None}

    def read_bounded(path, where, what):
        data = real(path, where, what)
        if what == "scheduler file":
            state["reads"] += 1
            Path(path).write_text(state["then"])
        return data

    monkeypatch.setattr(files, "read_bounded", read_bounded)
    return state


def test_a_scheduler_file_rewritten_after_the_check_cannot_redirect_the_connection(tmp_path, capsys, monkeypatch,
                                                                                    no_connection,
                                                                                    swapped_after_reading):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n')
    sched = tmp_path / "sched.json"
    # Checked as a loopback scheduler, then naming another machine: the connection goes where was checked.
    sched.write_text('{"address": "tcp://127.0.0.1:1"}')
    swapped_after_reading["then"] = '{"address": "tcp://node7.invalid:8786"}'
    assert main(["sweep", str(path), "--scheduler-file", "sched.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meshsim: error: --scheduler-file sched.json (tcp://127.0.0.1:1): cannot connect to the "
                          "Dask scheduler (OSError: connection refused)"), err
    assert no_connection == [("tcp://127.0.0.1:1", None)] and swapped_after_reading["reads"] == 1
    # The other way round: refused for what it said when read, whatever it says now.
    sched.write_text('{"address": "tcp://node7.invalid:8786"}')
    swapped_after_reading["then"] = '{"address": "tcp://127.0.0.1:1"}'
    assert main(["sweep", str(path), "--scheduler-file", "sched.json"]) == 2
    assert capsys.readouterr().err.startswith("meshsim: error: --scheduler-file sched.json "
                                              "(tcp://node7.invalid:8786): refused: tcp:// is unencrypted")
    assert len(no_connection) == 1 and swapped_after_reading["reads"] == 2
    # Half written when read (the scheduler still starting), complete a moment later: refused, not re-read.
    sched.write_text("")
    swapped_after_reading["then"] = '{"address": "tcp://node7.invalid:8786"}'
    assert main(["sweep", str(path), "--scheduler-file", "sched.json", "--insecure"]) == 2
    assert "--scheduler-file sched.json: is empty" in capsys.readouterr().err
    assert len(no_connection) == 1 and swapped_after_reading["reads"] == 3
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("contents, found", [
    ("", "is empty"),
    ("  \n", "is empty"),
    ('{"address": "tcp://127.0.0.1:1"', "is not JSON"),
    (b"\xff\xfe{}", "is not JSON"),
    ('["tcp://127.0.0.1:1"]', "is JSON but not an object"),
    ('{"id": "Scheduler-1"}', 'has no "address"'),
    ('{"address": 8786}', 'has "address": 8786, not an address'),
    ('{"address": ""}', 'has "address": "", not an address'),
])
def test_a_scheduler_file_without_an_address_is_refused_before_connecting(tmp_path, capsys, monkeypatch,
                                                                          no_connection, contents, found):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n')
    sched = tmp_path / "sched.json"
    sched.write_bytes(contents if isinstance(contents, bytes) else contents.encode())
    assert main(["sweep", str(path), "--scheduler-file", "sched.json", "--insecure"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"meshsim: error: --scheduler-file sched.json: {found}; a scheduler file is the JSON "
                          'object that dask scheduler --scheduler-file FILE writes, whose "address"') and \
        err.count("\n") == 1, err
    assert no_connection == [] and not (tmp_path / "results").exists()


def test_a_scheduler_file_that_is_missing_a_fifo_or_too_big_is_refused(tmp_path, capsys, monkeypatch, no_connection):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n')
    os.mkfifo(tmp_path / "fifo.json")  # opening it to read would wait for a writer
    (tmp_path / "big.json").write_text(" " * (files.LIMITS["scheduler file"] + 1))
    for name, message in (("nope.json", "--scheduler-file nope.json: no such file (the scheduler writes it when it "
                                        "starts: dask scheduler --scheduler-file FILE)"),
                          ("fifo.json", "--scheduler-file fifo.json: is a FIFO (named pipe)"),
                          ("big.json", "--scheduler-file big.json: 1,048,577 bytes")):
        assert main(["sweep", str(path), "--scheduler-file", name]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"meshsim: error: {message}") and err.count("\n") == 1, err
        assert name == "nope.json" or "a scheduler file" in err
    assert no_connection == [] and not (tmp_path / "results").exists()


# ---------------------------------------------------------------------------------------------
# The results folder


@pytest.mark.parametrize("name", ["summary.csv", "summary.h5", ".lock", ".summary.csv.tmp", ".summary.h5.tmp"])
def test_a_fifo_at_a_name_the_sweep_writes_is_refused_before_anything_runs(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    sw = sweep_in(tmp_path, out)
    msgs = refused(sw)
    what = {".lock": "sweep lock", ".summary.csv.tmp": "summary table's temporary file",
            ".summary.h5.tmp": "summary table's temporary file"}.get(name, "summary table")
    assert len(msgs) == 1 and says(msgs[0], out / name, "a FIFO (named pipe)", what), msgs
    assert sorted(p.name for p in out.iterdir()) == [name] and not files.is_regular(out / name)


def test_a_symbolic_link_at_the_summary_table_is_neither_written_through_nor_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "precious.csv"
    outside.write_text("precious\n")
    (out / "summary.csv").symlink_to(outside)
    (out / ".summary.h5.tmp").symlink_to(tmp_path / "nothing-yet.h5")  # dangling: would be made
    sw = sweep_in(tmp_path, out)
    msgs = refused(sw)
    assert len(msgs) == 2 and says(msgs[0], out / "summary.csv", "a symbolic link", "summary table")
    assert says(msgs[1], out / ".summary.h5.tmp", "a symbolic link", "summary table's temporary file")
    assert not (out / "points").exists() and not (out / ".lock").exists()
    # Nor by the table's own writer, for a link put there while a sweep runs.
    rows = {p.id: {"point_id": p.id, "status": "not run", "path": p.output} for p in sw.points}
    with pytest.raises(InputError, match="summary.csv: is a symbolic link"):
        write_summary(sw, rows)
    assert outside.read_text() == "precious\n" and (out / "summary.csv").is_symlink()
    assert not (tmp_path / "nothing-yet.h5").exists()


def test_the_results_folder_and_the_points_folder_must_be_folders(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    path = write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "pipe"}"\n')
    with pytest.raises(InputError) as e:
        load_sweep(path)
    assert e.value.problems == [f'{path}: sweep.output = "{tmp_path / "pipe"}": {tmp_path / "pipe"} is a FIFO (named '
                                "pipe), not a folder"]
    # A link where the folder was when the sweep was read, to nothing, then to a FIFO; a points
    # folder that is a FIFO.
    sw = sweep_in(tmp_path, tmp_path / "out")
    (tmp_path / "out").symlink_to(tmp_path / "nothing")
    msgs = refused(sw)
    assert len(msgs) == 1 and says(msgs[0], tmp_path / "out", "a symbolic link to nothing", "sweep's results folder")
    (tmp_path / "out").unlink()
    (tmp_path / "out").symlink_to(tmp_path / "pipe")
    msgs = refused(sw)
    assert len(msgs) == 1 and says(msgs[0], tmp_path / "out", "a FIFO", "sweep's results folder")
    (tmp_path / "out").unlink()
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "points")
    msgs = refused(sw)
    assert len(msgs) == 1 and says(msgs[0], tmp_path / "out" / "points", "a FIFO",
                                   "folder of the points' result files")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["points"]


def test_a_results_folder_that_is_a_link_to_a_folder_is_written_in(tmp_path):
    elsewhere = tmp_path / "scratch"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere)
    res = run_sweep(sweep_in(tmp_path, tmp_path / "out"), connect=None, progress=False)
    assert res.failed == 0 and (elsewhere / "summary.csv").is_file() and os.path.islink(tmp_path / "out")


def test_a_fifo_or_link_at_a_points_file_is_refused_before_any_point_runs(tmp_path, capsys):
    out = tmp_path / "out"
    sw = sweep_in(tmp_path, out, grid="migration.threshold = [1, 2, 3]")
    (out / "points").mkdir(parents=True)
    a, b = (Path(p.output) for p in sw.points[:2])
    os.mkfifo(a)
    outside = tmp_path / "precious.h5"
    outside.write_text("precious\n")
    b.with_name(f"{b.stem}.checkpoint.h5").symlink_to(outside)
    (out / "points" / "notes").mkdir()  # a folder of the user's own, at no name of the sweep's
    # The dry run lists the point without opening the FIFO (that would wait for a writer).
    assert point_status(sw.points[0]) == "incomplete"
    msgs = refused(sw)
    assert len(msgs) == 2 and says(msgs[0], a, "a FIFO (named pipe)", "result")
    assert says(msgs[1], b.with_name(f"{b.stem}.checkpoint.h5"), "a symbolic link", "checkpoint")
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted([a.name, f"{b.stem}.checkpoint.h5", "notes"])
    assert sorted(p.name for p in out.iterdir()) == ["points"] and outside.read_text() == "precious\n"
    # The command line says the same, with exit status 2.
    assert main(["sweep", str(sw.path), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"meshsim: error: {a}: is a FIFO (named pipe)" in err and "Traceback" not in err


def test_a_refused_sweep_removes_only_the_regular_lock_file_it_made(tmp_path):
    from meshsim.sweep.execute import FolderLock

    out = tmp_path / "out" / "deeper"
    sw = sweep_in(tmp_path, out)
    lock = FolderLock(sw).__enter__()
    assert files.is_regular(out / ".lock")
    lock.__exit__(InputError)  # refused before a point ran: what it made goes
    assert not (tmp_path / "out").exists()
    lock = FolderLock(sw).__enter__()
    outside = tmp_path / "precious"
    outside.write_text("precious\n")
    os.remove(out / ".lock")
    (out / ".lock").symlink_to(outside)  # not the file it made any more
    lock.__exit__(InputError)
    assert (out / ".lock").is_symlink() and outside.read_text() == "precious\n"


# ---------------------------------------------------------------------------------------------
# Reruns


def test_a_rerun_keeps_the_run_seconds_of_the_points_it_skips(tmp_path):
    out = tmp_path / "out"
    sw = sweep_in(tmp_path, out, grid="migration.threshold = [1, 2, 3]")
    run_sweep(sw)
    first = read_csv(sw.summary_csv)
    assert all(r["run_seconds"] and r["wall_seconds"] for r in first)
    os.remove(sw.points[1].output)
    res = run_sweep(sw)
    assert res.skipped == 2 and res.ran == 1
    again = read_csv(sw.summary_csv)
    # Skipped: the run time of the run that wrote the file, exactly; run again: its own.
    assert [again[i]["run_seconds"] for i in (0, 2)] == [first[i]["run_seconds"] for i in (0, 2)]
    assert again[1]["run_seconds"] and float(again[1]["run_seconds"]) >= 0
    with h5py.File(sw.summary_h5) as f:
        assert [repr(float(v)) for v in f["table/run_seconds"][:]] == [r["run_seconds"] for r in again]
    # A table row that does not describe the file there now (another run's wall_seconds) gives no time.
    again[0]["wall_seconds"] = repr(float(again[0]["wall_seconds"]) + 1.0)
    with open(sw.summary_csv, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(again[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(again)
    res = run_sweep(sw)
    assert res.ran == 0
    assert [r["run_seconds"] for r in read_csv(sw.summary_csv)] == ["", *(again[i]["run_seconds"] for i in (1, 2))]

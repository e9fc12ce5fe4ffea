"""Nothing a user points meshsim at is harmed, and no input or fault ends in a traceback
(docs/results.md, "Files meshsim touches" and "When a write fails").

- A result's names (NAME.h5, its .incomplete.h5, checkpoint, lock and their temporary names) taken
  by a device, a FIFO, a folder or a link: refused before the run, exit 2, and nothing on disk
  changes. The same for an export's trace and a plot's figures.
- A write that fails mid-run (a file-size limit: EFBIG; a full disk: ENOSPC on a small tmpfs; an
  I/O error injected into the writer; the file removed while the run writes it) ends the run with
  one message, exit 1, no traceback: what failed, what was kept and the command that resumes; the
  resumed run then finishes bit-identical to one never stopped.
- A checkpoint changed after it was written (one digit of its values, one byte of an array) is
  refused, exit 2, naming it.
- Inputs are read only when they are regular files of bounded size (a scenario, a model config, a
  reference table, a stopped run given to --resume): /dev/zero, a FIFO, an oversized file are
  refused at once; TOML and JSON nested beyond reason, integers beyond 64 bits and run names longer
  than a file name allows are refused with the key named.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from conftest import assert_same_results

from meshsim.checkpoint import checkpoint_path
from meshsim.cli import main
from meshsim.errors import RunFailed
from meshsim.output import ResultFile, incomplete_path
from meshsim.run import RunInterrupted, run_scenario
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SC = ROOT / "scenarios"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# smoke.toml made long enough to write past a small limit, flushed and checkpointed often
LONG = ["run.cycles=6000", "output.flush_every_cycles=500", "output.frame_every_cycles=100"]


def _state(path: Path):
    """What is at `path` (not following a link): kind, and for a regular file its bytes; for a link its target."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        return ("file", path.read_bytes())
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    return (stat.S_IFMT(st.st_mode), st.st_ino, getattr(st, "st_rdev", 0))


def _folder_state(folder: Path) -> dict:
    return {p.name: _state(p) for p in folder.iterdir()}


def _err(capsys, argv, code=2) -> str:
    assert main([str(a) for a in argv]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("meshsim: error: "), err
    return err


def _specials(tmp_path: Path) -> dict:
    """name -> a special file made at tmp_path/name: a FIFO, a character device (as root: a copy of
    the null device's node), a folder, a link to a regular file outside, and a dangling link."""
    made = {}
    os.mkfifo(tmp_path / "fifo")
    made["fifo"] = "a FIFO"
    if IS_ROOT:
        os.mknod(tmp_path / "dev", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
        made["dev"] = "a character device"
    (tmp_path / "dir").mkdir()
    made["dir"] = "a folder"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me\n")
    os.symlink(outside / "precious.txt", tmp_path / "link")
    made["link"] = "a symbolic link"
    os.symlink(outside / "nothing.h5", tmp_path / "dangling")
    made["dangling"] = "a symbolic link"
    return made


# ---------------------------------------------------------------------------------------------
# Output paths


@pytest.mark.parametrize("suffix", ["", ".incomplete", ".checkpoint", ".lock", ".incomplete.h5.part",
                                    ".checkpoint.h5.part"])
def test_a_result_name_taken_by_anything_but_a_regular_file_is_refused_and_left_as_it_was(tmp_path, capsys,
                                                                                          suffix):
    made = _specials(tmp_path)
    before = _folder_state(tmp_path)
    precious = (tmp_path / "outside" / "precious.txt").read_bytes()
    for name, kind in made.items():
        # the special file takes one of the names a run to R.h5 writes
        target = tmp_path / f"R{suffix}{'' if suffix.endswith(('.lock', '.part')) else '.h5'}"
        os.rename(tmp_path / name, target)
        err = _err(capsys, ["run", SC / "smoke.toml", "-o", tmp_path / "R.h5", "-q"])
        if name == "dir" and suffix == "":
            assert f"{target}: is a directory; give a file name" in err
        else:
            assert f"{target}: is {kind}" in err and "it writes only regular files" in err
        os.rename(target, tmp_path / name)
        assert _folder_state(tmp_path) == before, name
    assert (tmp_path / "outside" / "precious.txt").read_bytes() == precious
    assert list((tmp_path / "outside").iterdir()) == [tmp_path / "outside" / "precious.txt"]


@pytest.mark.skipif(not IS_ROOT, reason="making a device node needs root")
def test_minus_o_onto_a_device_changes_nothing_on_disk(tmp_path, capsys):
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = os.lstat(node)
    err = _err(capsys, ["run", SC / "smoke.toml", "-o", node, "-q"])
    assert "is a character device" in err
    after = os.lstat(node)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_export_and_plot_never_write_into_a_fifo_or_through_a_link(tmp_path, capsys):
    out = tmp_path / "r.h5"
    run_scenario(load_scenario(SC / "smoke.toml", ["run.cycles=400"]), out, threads=1, progress=False)
    os.mkfifo(tmp_path / "t.json")
    err = _err(capsys, ["export", out, "-o", tmp_path / "t.json"])
    assert "is a FIFO" in err and stat.S_ISFIFO(os.lstat(tmp_path / "t.json").st_mode)
    figs = tmp_path / "figs"
    figs.mkdir()
    (tmp_path / "precious.png").write_bytes(b"keep")
    os.symlink(tmp_path / "precious.png", figs / "heatmap.png")
    err = _err(capsys, ["plot", out, "--kind", "heatmap", "-o", figs])
    assert "heatmap.png: is a symbolic link" in err
    assert (tmp_path / "precious.png").read_bytes() == b"keep" and os.path.islink(figs / "heatmap.png")
    assert sorted(p.name for p in figs.iterdir()) == ["heatmap.png"]
    (tmp_path / "file").write_text("x")
    err = _err(capsys, ["plot", out, "--kind", "heatmap", "-o", tmp_path / "file"])
    assert "file: is a regular file; the figures' folder must be a folder" in err


# ---------------------------------------------------------------------------------------------
# Write errors


def _reference(tmp_path: Path, overrides) -> Path:
    """An uninterrupted run of smoke.toml with `overrides`, in a fresh process (which also fills
    Numba's cache, so a limited process compiles nothing)."""
    ref = tmp_path / "ref" / "ref.h5"
    ref.parent.mkdir()
    r = subprocess.run([sys.executable, "-m", "meshsim", "run", SC / "smoke.toml", *overrides, "-o", ref, "-q",
                        "--threads", "1"], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ref


def _check_failure_message(err: str, words: str, inc: Path) -> None:
    assert "Traceback" not in err and err.startswith("meshsim: error: "), err
    lines = err.strip().splitlines()
    assert len(lines) == 3, err
    assert f"({words})" in lines[0] and "the run stopped at cycle" in lines[0]
    assert lines[1].startswith(f"meshsim: Kept: {inc}, as of its last flush at cycle ")
    assert "and its checkpoint at cycle" in lines[1]
    assert lines[2].endswith(f"meshsim run --resume {inc}")


def _resume_and_compare(inc: Path, out: Path, ref: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "meshsim", "run", "--resume", inc, "-q", "--threads", "1"], env=ENV,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.exists() and not inc.exists() and not checkpoint_path(out).exists()
    assert not list(out.parent.glob("*.part")) and not list(out.parent.glob("*.lock"))
    assert_same_results(ref, out)


def test_a_file_size_limit_mid_run_ends_with_one_message_and_the_run_resumes(tmp_path):
    ref = _reference(tmp_path, LONG)
    out = tmp_path / "r.h5"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (160_000, resource.RLIM_INFINITY))

    r = subprocess.run([sys.executable, "-m", "meshsim", "run", SC / "smoke.toml", *LONG, "-o", out, "-q",
                        "--threads", "1"], env=ENV, capture_output=True, text=True, preexec_fn=limit)
    assert r.returncode == 1, r.stderr
    inc = incomplete_path(out)
    _check_failure_message(r.stderr, "File too large", inc)
    assert "once the file-size limit allows more" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.checkpoint.h5", "r.incomplete.h5", "ref"]
    assert main(["report", str(inc)]) == 0  # readable as it is
    _resume_and_compare(inc, out, ref)


@pytest.mark.skipif(not IS_ROOT, reason="mounting a small tmpfs needs root")
def test_a_full_disk_mid_run_ends_with_one_message_and_the_run_resumes_once_there_is_space(tmp_path):
    ref = _reference(tmp_path, LONG)
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", disk], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        out = disk / "r.h5"
        r = subprocess.run([sys.executable, "-m", "meshsim", "run", SC / "smoke.toml", *LONG, "-o", out, "-q",
                            "--threads", "1"], env=ENV, capture_output=True, text=True)
        assert r.returncode == 1, r.stderr
        inc = incomplete_path(out)
        _check_failure_message(r.stderr, "No space left on device", inc)
        assert "once there is free space again" in r.stderr
        subprocess.run(["mount", "-o", "remount,size=16m", disk], check=True)
        _resume_and_compare(inc, out, ref)
    finally:
        subprocess.run(["umount", "-l", disk], capture_output=True)


def _failing_flush(monkeypatch, at: int, exc):
    """ResultFile.flush raises `exc` at its `at`-th call (counting from 1)."""
    calls = [0]
    flush = ResultFile.flush

    def failing(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == at:
            raise exc
        return flush(self, *args, **kwargs)

    monkeypatch.setattr(ResultFile, "flush", failing)


@pytest.mark.parametrize("exc, words", [
    (OSError(errno.EIO, "Input/output error"), "Input/output error"),
    (RuntimeError("Unable to synchronously flush file (file write failed: time = now, filename = 'x', file "
                  "descriptor = 4, errno = 5, error message = 'Input/output error', buf = 0x0)"), "Input/output error"),
], ids=["oserror", "hdf5"])
def test_an_io_error_in_the_writer_ends_with_one_message_and_the_run_resumes(tmp_path, capsys, monkeypatch, exc,
                                                                            words):
    import meshsim.run

    monkeypatch.setattr(meshsim.run, "CHECKPOINT_BYTES_PER_SECOND", float("inf"))  # one due at every flush
    sc = ["run", SC / "smoke.toml", *LONG, "-q", "--threads", "1"]
    ref = tmp_path / "ref.h5"
    assert main([str(a) for a in [*sc, "-o", ref]]) == 0
    out = tmp_path / "r.h5"
    _failing_flush(monkeypatch, 5, exc)
    assert main([str(a) for a in [*sc, "-o", out]]) == 1
    inc = incomplete_path(out)
    _check_failure_message(capsys.readouterr().err, words, inc)
    monkeypatch.undo()
    assert main(["run", "--resume", str(inc), "-q", "--threads", "1"]) == 0
    assert_same_results(ref, out)


def test_a_result_removed_while_the_run_writes_it_ends_with_a_message_that_says_so(tmp_path, capsys):
    out = tmp_path / "r.h5"
    inc = incomplete_path(out)
    calls = [0]

    def remove_it():
        calls[0] += 1
        if calls[0] == 3:
            inc.unlink()
        return False

    sc = load_scenario(SC / "smoke.toml", LONG)
    with pytest.raises(RunFailed) as e:
        run_scenario(sc, out, threads=1, progress=False, max_cycles_per_call=100, stop=remove_it)
    text = str(e.value)
    assert "r.incomplete.h5 was removed, renamed or replaced while the run wrote it" in text
    assert "Kept: nothing" in text and "free space" not in text and "run the scenario again" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_sweep_point_whose_write_fails_is_a_failed_point_not_a_crash(tmp_path, monkeypatch):
    from meshsim.sweep import load_sweep, run_sweep

    (tmp_path / "s.toml").write_text(
        f'[sweep]\nbase = "{SC / "smoke.toml"}"\noutput = "{tmp_path / "out"}"\n'
        '[grid]\n"run.cycles" = [600]\n')
    _failing_flush(monkeypatch, 2, OSError(errno.ENOSPC, "No space left on device"))
    res = run_sweep(load_sweep(tmp_path / "s.toml"), connect=None, progress=False)
    assert res.failed == 1


# ---------------------------------------------------------------------------------------------
# Checkpoint integrity


def _stopped(tmp_path: Path) -> Path:
    out = tmp_path / "r.h5"
    with pytest.raises(RunInterrupted):
        run_scenario(load_scenario(SC / "smoke.toml", ["run.cycles=1200", "output.flush_every_cycles=100"]), out,
                     threads=1, progress=False, max_cycles_per_call=45, stop=lambda: True)
    return out


def test_a_checkpoint_changed_after_it_was_written_is_refused(tmp_path, capsys):
    out = _stopped(tmp_path)
    inc, ck = incomplete_path(out), checkpoint_path(out)
    saved, before = ck.read_bytes(), inc.read_bytes()
    # one digit of its values
    with h5py.File(ck, "r+") as f:
        text = f["state"].attrs["values"]
        text = text.decode() if isinstance(text, bytes) else text
        i = next(k for k, c in enumerate(text) if c in "123456789")
        f["state"].attrs["values"] = text[:i] + str(int(text[i]) % 9 + 1) + text[i + 1:]
    err = _err(capsys, ["run", "--resume", inc])
    assert f"{ck}: the checkpoint's contents do not match its digest" in err
    # one byte of an array, where it lies in the file (a small array is stored whole, uncompressed)
    ck.write_bytes(saved)
    with h5py.File(ck, "r") as f:
        name, ds = next((k, d) for k, d in f["state"].items() if d.chunks is None and d.nbytes >= 1)
        offset = ds.id.get_offset()
    data = bytearray(saved)
    data[offset] ^= 0x01
    ck.write_bytes(bytes(data))
    err = _err(capsys, ["run", "--resume", inc])
    assert "do not match its digest" in err, name
    # one byte inside a compressed array: unreadable or not matching, refused either way
    with h5py.File(ck, "r") as f:
        ds = next(d for d in f["state"].values() if d.chunks is not None)
        info = ds.id.get_chunk_info(0)
    data = bytearray(saved)
    data[info.byte_offset + info.size // 2] ^= 0xFF
    ck.write_bytes(bytes(data))
    err = _err(capsys, ["run", "--resume", inc])
    assert "do not match its digest" in err or "cannot be read" in err
    assert inc.read_bytes() == before
    ck.write_bytes(saved)
    assert main(["run", "--resume", str(inc), "-q"]) == 0


# ---------------------------------------------------------------------------------------------
# Inputs


def test_special_and_oversized_inputs_are_refused_without_reading_them(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo.toml")
    assert "fifo.toml: is a FIFO (named pipe); a scenario file must be a regular file" in _err(
        capsys, ["run", tmp_path / "fifo.toml"])
    assert "is a character device; a scenario file must be a regular file" in _err(capsys, ["validate", "/dev/zero"])
    assert "is a folder; a scenario file must be a regular file" in _err(capsys, ["validate", tmp_path])
    big = tmp_path / "big.toml"
    big.write_bytes((SC / "smoke.toml").read_bytes() + b"#" * 2**20)
    assert "a scenario file may be at most 1 MiB" in _err(capsys, ["validate", big])
    err = _err(capsys, ["validate", SC / "wse2_gpt2_small.toml", "workload.model_config=/dev/zero"])
    assert "is a character device; a model config must be a regular file" in err
    err = _err(capsys, ["validate", SC / "wse2_gpt2_small.toml", f"workload.model_config={tmp_path / 'fifo.toml'}"])
    assert "is a FIFO (named pipe); a model config must be a regular file" in err
    huge = tmp_path / "config.json"
    huge.write_bytes(b'{"model_type": "gpt2", "pad": "' + b"x" * (16 * 2**20) + b'"}')
    assert "a model config may be at most 16 MiB" in _err(
        capsys, ["validate", SC / "wse2_gpt2_small.toml", f"workload.model_config={huge}"])
    assert "a reference table must be a regular file" in _err(
        capsys, ["accuracy", "--no-shipped", "--table", "/dev/zero"])
    assert not any(p.suffix == ".h5" for p in tmp_path.iterdir())


def test_a_fifo_scenario_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "s.toml")
    r = subprocess.run([sys.executable, "-m", "meshsim", "validate", tmp_path / "s.toml"], env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "is a FIFO" in r.stderr and "Traceback" not in r.stderr


def test_resume_of_anything_but_a_stopped_run_says_what_it_is(tmp_path, capsys):
    (tmp_path / "s.checkpoint.toml").write_text("precious")
    assert "not a result file; --resume takes a stopped run's NAME.incomplete.h5" in _err(
        capsys, ["run", "--resume", SC / "smoke.toml"])
    assert "/dev/zero: is a character device; --resume takes" in _err(capsys, ["run", "--resume", "/dev/zero"])
    (tmp_path / "d.h5").mkdir()
    assert "d.h5: is a folder" in _err(capsys, ["run", "--resume", tmp_path / "d.h5"])
    (tmp_path / "other.h5").write_bytes(b"not hdf5")
    assert "not a complete meshsim result" in _err(capsys, ["run", "--resume", tmp_path / "other.h5"])
    assert (tmp_path / "s.checkpoint.toml").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5", "other.h5", "s.checkpoint.toml"]


def test_inputs_beyond_any_reason_are_refused_with_the_key_named(tmp_path, capsys):
    base = (SC / "smoke.toml").read_text()
    deep = tmp_path / "deep.toml"
    deep.write_text(base.replace("[run]", "[run]\nx = " + "[" * 100_000 + "]" * 100_000, 1))
    assert "nested too deep to read" in _err(capsys, ["validate", deep])
    nested = tmp_path / "nested.toml"
    nested.write_text(base.replace("[run]", "[run]\nx = " + "[" * 40 + "]" * 40, 1))
    assert "run.x[0][0][0]" in _err(capsys, ["validate", nested])
    digits = tmp_path / "digits.toml"
    digits.write_text(base.replace("cycles = 2000", "cycles = " + "7" * 5000))
    assert "a scenario's integers have at most 64 bits" in _err(capsys, ["validate", digits])
    wide = tmp_path / "wide.toml"
    wide.write_text(base.replace("cycles = 2000", "cycles = " + "7" * 4000))
    assert "run.cycles = an integer of 4000 digits: beyond 64 bits" in _err(capsys, ["validate", wide])
    assert "run.name = " in _err(capsys, ["validate", SC / "smoke.toml", "run.name=" + "n" * 300])
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "gpt2", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert "nests too deep to read" in _err(
        capsys, ["validate", SC / "wse2_gpt2_small.toml", f"workload.model_config={config}"])
    config.write_text('{"model_type": "gpt2", "n_embd": ' + "7" * 5000 + "}")
    assert "not a model config" in _err(
        capsys, ["validate", SC / "wse2_gpt2_small.toml", f"workload.model_config={config}"])
    long = tmp_path / ("s" * 240 + ".toml")
    long.write_text(base)
    assert "longer than a file name may be (255)" in _err(capsys, ["run", long, "-o", tmp_path / ("r" * 240 + ".h5")])
    assert not list(tmp_path.glob("*.h5"))


def test_an_oversized_sweep_base_is_refused(tmp_path, capsys):
    (tmp_path / "s.toml").write_text('[sweep]\nbase = "/dev/zero"\n[grid]\n"run.cycles" = [100]\n')
    err = _err(capsys, ["sweep", tmp_path / "s.toml", "--dry-run"])
    assert "is a character device" in err
    shutil.rmtree(tmp_path / "results", ignore_errors=True)


def test_a_hdf5_error_text_without_an_errno_is_not_taken_for_a_failed_write():
    from meshsim.output import system_words

    assert system_words(RuntimeError("Unable to open object (component not found)")) is None
    assert system_words(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert system_words(ValueError("x")) is None


def test_a_resume_whose_writes_fail_keeps_the_stopped_file_and_its_checkpoint(tmp_path, capsys, monkeypatch):
    import meshsim.output

    out = _stopped(tmp_path)
    inc, ck = incomplete_path(out), checkpoint_path(out)
    before, saved = inc.read_bytes(), ck.read_bytes()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(meshsim.output, "copy_rows", full)
    assert main(["run", "--resume", str(inc), "-q"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("meshsim: error: ")
    assert "the run cannot resume now: writing the resumed run's file failed (No space left on device)" in err
    assert f"meshsim run --resume {inc}" in err
    assert inc.read_bytes() == before and ck.read_bytes() == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.checkpoint.h5", "r.incomplete.h5"]
    monkeypatch.undo()
    assert main(["run", "--resume", str(inc), "-q"]) == 0


def _limited(args, limit: int, cwd=None, env=None):
    """`meshsim ARGS` in a process whose files may not grow past `limit` bytes."""
    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "meshsim", *map(str, args)], env=env or ENV, cwd=cwd,
                          capture_output=True, text=True, preexec_fn=cap)


def test_a_layout_that_cannot_be_written_leaves_nothing_and_a_resume_leaves_the_stopped_run(tmp_path):
    _reference(tmp_path, LONG)  # the kernels compiled: the limited processes write no cache
    out = tmp_path / "r.h5"
    r = _limited(["run", SC / "smoke.toml", *LONG, "-o", out, "-q", "--threads", "1"], 4096)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("meshsim: error: ")
    assert "the run could not start: laying out its file failed (File too large)" in r.stderr
    assert "Kept: nothing (nothing was written)" in r.stderr and len(r.stderr.strip().splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref"]
    # a stopped run, resumed where its file cannot be laid out again
    out = _stopped(tmp_path)
    inc, ck = incomplete_path(out), checkpoint_path(out)
    before, saved = inc.read_bytes(), ck.read_bytes()
    r = _limited(["run", "--resume", inc, "-q"], 4096)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and f"{inc}: the run cannot resume now: " in r.stderr
    assert "(File too large)" in r.stderr and f"meshsim run --resume {inc}" in r.stderr
    assert inc.read_bytes() == before and ck.read_bytes() == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.checkpoint.h5", "r.incomplete.h5", "ref"]


# A run whose file may grow only a little once it is being finished: the limit is set just after
# the flushed file is copied, so the totals fail to be written inside HDF5 itself.
FINISHING = """
import os, resource, sys
import meshsim.run
from meshsim import output
from meshsim.cli import main
meshsim.run.CHECKPOINT_BYTES_PER_SECOND = float("inf")  # a checkpoint at every flush
copy = output.ResultFile._finishing
def finishing(self):
    copy(self)
    if self.state == "finishing":
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(self.part) + 512, resource.RLIM_INFINITY))
output.ResultFile._finishing = finishing
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("scenario, overrides", [
    ("smoke.toml", ["run.cycles=1200", "output.flush_every_cycles=100"]),
    ("ipu_gpt2_even.toml", ["run.steps=6"]),
], ids=["mesh", "ipu"])
def test_totals_that_cannot_be_written_keep_the_flushed_file(tmp_path, scenario, overrides):
    """The ipu flushes by the clock, so its failure may come before any checkpoint: its file is
    checked; the mesh, flushed every 100 cycles and checkpointed at the first flush at least, is
    resumed and compared too."""
    ref = tmp_path / "ref.h5"
    assert main(["run", str(SC / scenario), *overrides, "-o", str(ref), "-q", "--threads", "1"]) == 0
    out = tmp_path / "r.h5"
    r = subprocess.run([sys.executable, "-c", FINISHING, "run", SC / scenario, *overrides, "-o", out, "-q",
                        "--threads", "1"], env=ENV, capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    inc = incomplete_path(out)
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and lines[0].startswith("meshsim: error: "), r.stderr
    assert "(File too large)" in lines[0] and lines[1].startswith(f"meshsim: Kept: {inc}, as of its last flush")
    assert not list(tmp_path.glob("*.part"))
    assert main(["report", str(inc)]) == 0
    if scenario == "smoke.toml":
        assert lines[2].startswith("meshsim: To go on from cycle ")  # its last checkpoint's, as the clock made it
        assert lines[2].endswith(f" once the file-size limit allows more: meshsim run --resume {inc}")
        assert main(["run", "--resume", str(inc), "-q", "--threads", "1"]) == 0
        assert_same_results(ref, out)

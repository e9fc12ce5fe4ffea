"""What meshsim may do to the files a user points it at (docs/results.md, "Files meshsim touches").

meshsim reads only regular files, each of a bounded size, and writes, renames and deletes only
regular files it made: a path that names a folder, a device, a FIFO, a socket or a symbolic link
is refused before anything is written (an InputError naming the path and what it is), and a
cleanup that meets one leaves it alone. meshsim is often run as root, where nothing else would
stop `-o /dev/null` from replacing the system's device node with a result file.

Reading: `read_bounded` opens a path only once it is known to be a regular file (opening some
devices has effects of its own), without blocking, checks again on the open file, and reads at
most its limit. The limits of each kind of input are in LIMITS.

Writing: `check_target` before a run for every name it will write; `create_new` opens a file that
must not exist (O_EXCL, so never through a link someone put there); `replace` renames a file of
ours over a regular file or nothing; `remove` deletes a regular file and nothing else;
`open_for_lock` opens (or makes) a lock file and `lock_exclusive` locks it;
`write_through_temporary` writes an output (a figure, a trace) as a new file that then takes its
name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputError

MiB = 2**20
GiB = 2**30

#: The most bytes meshsim reads of each kind of input file (docs/results.md, "Files meshsim touches").
LIMITS = {
    "scenario file": 1 * MiB,
    "sweep file": 1 * MiB,
    "model config": 16 * MiB,
    "trace file": 2 * GiB,
    "reference table": 16 * MiB,
    "sweep table": 256 * MiB,
    "scheduler file": 1 * MiB,
}


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"  # a door or a whiteout: no kind with a common name


def size_text(n: int) -> str:
    """A byte count as a person reads it: 1 MiB, 16 MiB, 2 GiB, 1,536 bytes."""
    for unit, name in ((GiB, "GiB"), (MiB, "MiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit:,} {name}"
    return f"{n:,} bytes"


def check_regular(path, where: str, what: str) -> os.stat_result:
    """The stat of `path` (links followed), which must be an existing regular file of at most
    LIMITS[what] bytes; InputError naming `where` otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError([f"{where}: no such {what}"]) from None
    except OSError as e:
        raise InputError([f"{where}: cannot read the {what}: {e.strerror or e}"]) from None
    _check_stat(st, where, what)
    return st


def _check_stat(st: os.stat_result, where: str, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError([f"{where}: is {kind_of(st.st_mode)}; a {what} must be a regular file"])
    limit = LIMITS.get(what)
    if limit is not None and st.st_size > limit:
        raise InputError([f"{where}: {st.st_size:,} bytes; a {what} may be at most {size_text(limit)}"])


def read_bounded(path, where: str, what: str) -> bytes:
    """The bytes of the regular file `path`, at most LIMITS[what] of them; InputError naming
    `where` (what the user wrote) for a missing, unreadable, special or oversized file."""
    check_regular(path, where, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError([f"{where}: cannot read the {what}: {e.strerror or e}"]) from None
    try:
        _check_stat(os.fstat(fd), where, what)  # the file opened is the file checked
        limit = LIMITS.get(what)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 * MiB)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if limit is not None and total > limit:
                raise InputError([f"{where}: grew past {size_text(limit)} while read; a {what} may be at most "
                                  f"{size_text(limit)}"])
        return b"".join(chunks)
    except OSError as e:
        raise InputError([f"{where}: cannot read the {what}: {e.strerror or e}"]) from None
    finally:
        os.close(fd)


def check_target(path, what: str = "file") -> None:
    """`path` may be written, renamed over or removed by meshsim: it is a regular file or nothing
    (a symbolic link is not followed: it is refused). InputError naming it and what it is otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError([f"{path}: cannot be checked ({e.strerror or e}); meshsim writes only regular files"]) \
            from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError([f"{path}: is {kind_of(st.st_mode)}, where meshsim would write its {what}: it writes only "
                          "regular files, and leaves this as it is; remove it or choose another path"])


def check_folder(path, what: str = "folder") -> None:
    """`path` is a folder (a link to one will do: meshsim writes in it, not on it), or nothing yet
    (meshsim then makes it): InputError otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError([f"{path}: is a symbolic link to nothing; the {what} must be a folder, or a name "
                              "meshsim can make one at"]) from None
        return
    except OSError as e:
        raise InputError([f"{path}: cannot be checked ({e.strerror or e})"]) from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError([f"{path}: is {kind_of(st.st_mode)}; the {what} must be a folder, or a name meshsim can "
                          "make one at"])


def is_regular(path) -> bool:
    """Whether `path` is a regular file itself (not through a link)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def remove(path) -> bool:
    """Delete `path` if it is a regular file; anything else (nothing, a folder, a device, a link)
    is left as it is. Whether a file was removed."""
    if not is_regular(path):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def replace(src, dst) -> None:
    """Rename the file `src` (one meshsim made) over `dst`, which must be a regular file or nothing."""
    check_target(dst)
    os.replace(src, dst)


def create_new(path, mode: int = 0o644) -> int:
    """A descriptor of a new regular file at `path`, opened for writing; a regular file there is
    removed first, and anything else there is refused (InputError). O_EXCL: never through a link."""
    check_target(path)
    remove(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)


def write_new(path, data: bytes) -> None:
    """Write `data` as the new regular file `path` (see create_new), forced to disk."""
    fd = create_new(path)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_new(src, dst) -> None:
    """Copy the regular file `src` to the new regular file `dst` (see create_new)."""
    fd = create_new(dst)
    try:
        with open(src, "rb") as fin, os.fdopen(os.dup(fd), "wb") as fout:
            while True:
                chunk = fin.read(16 * MiB)
                if not chunk:
                    break
                fout.write(chunk)
    finally:
        os.close(fd)


def open_text_new(path, newline=None):
    """A text file object on the new regular file `path` (see create_new), UTF-8."""
    return os.fdopen(create_new(path), "w", encoding="utf-8", newline=newline)


def open_for_lock(path, what: str) -> int:
    """A descriptor of the regular file `path`, made if missing, to take a lock on: opened never
    through a link and never waiting (on a FIFO put there since the check), and checked once open;
    InputError naming the path and what is there otherwise."""
    check_target(path, what)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        raise InputError([f"{path}: cannot make the {what} there ({e.strerror or e})"]) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        check_target(path, what)  # says what it is
        raise InputError([f"{path}: changed as it was opened; meshsim writes its {what} only as a regular file"])
    return fd


def lock_exclusive(path, what: str) -> tuple[int, bool]:
    """(descriptor, locked) of the lock file `path` (open_for_lock) with its exclusive lock taken:
    BlockingIOError, the descriptor closed, while another process holds it; locked is False on a
    filesystem without locks (the descriptor open all the same). A lock file its holder removed as
    this one opened it is opened again."""
    import fcntl

    while True:
        fd = open_for_lock(path, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise
        except OSError:
            return fd, False
        if same_file(path, fd):
            return fd, True
        os.close(fd)


def write_through_temporary(path, what: str, save, by_name: bool = False) -> None:
    """Write `path` as a new file: `save(target)` writes into `target`, a binary file object on a
    new file beside it (made with O_EXCL), or, `by_name`, that file's name (for writers that open it
    themselves); the new file then takes `path`'s place, which must be a regular file or nothing. A
    write that fails (a full disk) is RunFailed, and leaves nothing behind."""
    from .errors import RunFailed

    path = Path(path)
    check_target(path, what)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.part{path.suffix}")
    try:
        if by_name:
            check_target(tmp)
            remove(tmp)
            save(tmp)
        else:
            with os.fdopen(create_new(tmp), "wb") as fh:
                save(fh)
        replace(tmp, path)
    except OSError as e:
        raise RunFailed(f"{path}: cannot write the {what} ({e.strerror or e}); nothing was left behind") from None
    finally:
        remove(tmp)


def same_file(path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (not removed, renamed away or replaced)."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def fsync_path(path) -> None:
    """Force a regular file, or a folder's entries, to disk (where the system allows it)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a folder on a system that cannot sync one
        pass
    finally:
        os.close(fd)

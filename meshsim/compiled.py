"""A kernel compiled once however many processes want it at once (docs/design.md, "Compiling once").

Numba keeps a kernel's machine code in a disk cache, but a process whose kernel is not there yet
compiles it itself, even while another process is compiling the same kernel: the workers of a local
sweep, or several runs started together on a fresh install, each compiled the mesh kernels (about
110 s on two cores) at the same time, and so took as long as one after the other.

`call(kernel, *args, **kwargs)` calls a kernel, but a process's first call of it first gets its
machine code for those arguments under a lock on a file beside the kernel's cache (`flock`, held
only while loading or compiling): the first process compiles and saves it, the others wait for it
and then load it from the cache. A process whose kernel is already cached holds the lock only while
it loads it, well under a second. The lock file (`<kernel's module>.<name>.meshsim.lock`) is made once
and is never written to or removed; a path there that is anything but a regular file (a symbolic
link, a pipe) is left alone and the kernel is compiled without a lock, as Numba would.
"""

from __future__ import annotations

import inspect
import os
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

_READY: set = set()  # the kernels this process has called through `call`


def call(kernel, /, *args, **kwargs):
    """kernel(*args, **kwargs), its machine code got under the kernel's lock at the first call."""
    if kernel not in _READY:
        ready(kernel, args, kwargs)
        _READY.add(kernel)
    return kernel(*args, **kwargs)


def ready(kernel, args: tuple, kwargs: dict) -> None:
    """Load or compile `kernel`'s machine code for these arguments, under its lock; nothing for a
    plain function (Numba's JIT disabled)."""
    if not hasattr(kernel, "compile") or not hasattr(kernel, "py_func"):
        return
    sig = signature(kernel, args, kwargs)
    if sig in kernel.overloads:
        return
    with lock(kernel):
        kernel.compile(sig)


def signature(kernel, args: tuple, kwargs: dict) -> tuple:
    """The Numba types the dispatcher gives these arguments when it is called with them: each value
    typed as an argument, a parameter left to its default as Numba's Omitted(default)."""
    from numba import typeof, types
    from numba.core.typing.typeof import Purpose

    params = inspect.signature(kernel.py_func)
    bound = params.bind(*args, **kwargs)
    out = []
    for name, p in params.parameters.items():
        if name in bound.arguments:
            out.append(typeof(bound.arguments[name], Purpose.argument))
        else:
            out.append(types.Omitted(p.default))
    return tuple(out)


def lock_path(kernel) -> Path | None:
    """The lock file of a kernel: in the folder Numba keeps its cache in; None where Numba does not
    say (a Numba without this attribute, or a kernel without a disk cache)."""
    cache = getattr(kernel, "_cache", None)
    folder = getattr(cache, "_cache_path", None)
    if not folder:
        return None
    func = kernel.py_func
    module = func.__module__.rsplit(".", 1)[-1]
    return Path(folder) / f"{module}.{func.__qualname__}.meshsim.lock"


@contextmanager
def lock(kernel):
    """Hold the kernel's lock (waiting, with one line on stderr, while another process holds it), or
    nothing where there is no lock file to be had."""
    fd = _open_lock(lock_path(kernel))
    if fd is None:
        yield
        return
    import fcntl

    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from tqdm import tqdm

            tqdm.write(f"meshsim: another process is compiling {kernel.py_func.__qualname__}; waiting to load it "
                       "from the cache", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def _open_lock(path: Path | None) -> int | None:
    """A descriptor of the lock file, made if it is not there; None where it cannot be had as a
    regular file (no folder, no permission, a link, a pipe, a platform without flock)."""
    if path is None or not hasattr(os, "O_NOFOLLOW"):
        return None
    try:
        import fcntl  # noqa: F401  (POSIX only)
    except ImportError:
        return None
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)  # (Numba made the folder, when it chose it)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd

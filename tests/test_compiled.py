"""A kernel is compiled once however many processes want it at once (meshsim/compiled.py, docs/design.md,
"Compiling once"), and its lock harms nothing that is already at the lock's path. A small kernel in a
module of the test's own stands for the machines' kernels: what is locked does not depend on the kernel."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from meshsim.compiled import call, lock_path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = """
from numba import njit


@njit(cache=True)
def f(x, y=2):
    return x + y
"""


def _module(tmp_path, name):
    (tmp_path / f"{name}.py").write_text(KERNEL)
    return tmp_path


def _python(tmp_path, script, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
               NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=env, text=True, **kw)


def test_a_process_waits_for_the_one_compiling_and_loads_what_it_compiled(tmp_path):
    _module(tmp_path, "tiny")
    holder = _python(tmp_path, """
        import sys, tiny
        from meshsim.compiled import lock, signature
        with lock(tiny.f):
            tiny.f.compile(signature(tiny.f, (1,), {}))
            print("compiled", flush=True)
            sys.stdin.readline()
        """, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "compiled"
    waiter = _python(tmp_path, """
        import tiny
        from numba.core import event
        from meshsim.compiled import call
        compiled = []
        class Seen(event.Listener):
            def on_start(self, ev):
                compiled.append(ev.data["dispatcher"].py_func.__name__)
            def on_end(self, ev):
                pass
        event.register("numba:compile", Seen())
        print(call(tiny.f, 40), compiled)
        """, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # it says it waits before it waits (the holder goes on only when told, so this is no race)
    said = waiter.stderr.readline().strip()
    assert said == "meshsim: another process is compiling f; waiting to load it from the cache"
    holder.stdin.write("\n")
    holder.stdin.close()
    assert holder.wait() == 0
    out, err = waiter.communicate()
    assert waiter.returncode == 0, err
    assert out.split() == ["42", "[]"]  # nothing compiled: loaded from the holder's cache


def test_the_first_call_gets_the_code_a_plain_call_would_use(tmp_path, monkeypatch):
    from numba.core import event

    monkeypatch.syspath_prepend(str(_module(tmp_path, "tiny_signature")))
    import tiny_signature

    compiled = []

    class Seen(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["args"])

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Seen()):
        assert call(tiny_signature.f, 1) == 3  # y left to its default
        assert tiny_signature.f(7) == 9
    assert len(compiled) == 1 and len(tiny_signature.f.overloads) == 1
    assert lock_path(tiny_signature.f).is_file() and lock_path(tiny_signature.f).stat().st_size == 0


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_lock_path_that_is_no_regular_file_is_left_alone(tmp_path, monkeypatch, kind):
    monkeypatch.syspath_prepend(str(_module(tmp_path, f"tiny_{kind}")))
    module = __import__(f"tiny_{kind}")
    path = lock_path(module.f)
    target = tmp_path / "precious"
    target.write_text("keep me")
    before = target.stat()
    if kind == "link":
        path.symlink_to(target)
    else:
        os.mkfifo(path)
    assert call(module.f, 40) == 42  # compiled without a lock, and no wait on the pipe
    assert target.read_text() == "keep me" and target.stat().st_mtime_ns == before.st_mtime_ns
    assert path.is_symlink() if kind == "link" else not path.is_file()

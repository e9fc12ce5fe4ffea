"""A pytest plugin (`-p unspliced`, with NUMBA_DISABLE_JIT=1): each spliced kernel (kernels/splice.py)
runs its steps as the plain functions they are written as, each called with its arguments and
returning what it changes, in place of the one function they are spliced into. tests/test_splice.py
runs the kernel tests so: the steps do as functions what they do spliced."""

import importlib
import os

from kernels.splice import SPLICED


def pytest_configure(config):
    if os.environ.get("NUMBA_DISABLE_JIT") != "1":
        raise RuntimeError("the unspliced steps run only as Python: set NUMBA_DISABLE_JIT=1")
    namespaces = {}
    for spec in SPLICED:
        module = importlib.import_module("kernels." + spec.target.removesuffix(".py"))
        key = (spec.target, spec.sources)
        if key not in namespaces:
            namespaces[key] = dict(vars(module))
            for name in spec.sources:
                path = spec.root / name
                exec(compile(path.read_text(), str(path), "exec"), namespaces[key])
        setattr(module, spec.entry, namespaces[key][spec.entry])

"""`python -m meshsim`: the command line."""

import importlib.util
import os
import sys


def _unshadow():
    """Load the package itself where a folder named `meshsim` in the current folder shadowed it.

    Run from the folder above a clone named `meshsim`, with the project installed in editable mode,
    Python finds the clone's top level (a folder without `__init__.py`) first and imports it as an
    empty namespace package; the submodules still load, but the package's own names do not. This puts
    the package whose `__main__` is running in its place.
    """
    package = sys.modules.get(__package__ or "meshsim")
    if package is None or getattr(package, "__file__", None) is not None:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        package.__name__, os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[package.__name__] = module
    spec.loader.exec_module(module)


_unshadow()

from .cli import main  # noqa: E402  (after the package is in place)

sys.exit(main())

"""Deprecated: the network bounds are meshsim.mesh.noc (the mesh's own module)."""

import warnings

from .mesh import noc as _noc


def __getattr__(name):
    warnings.warn("meshsim.noc is deprecated: use meshsim.mesh.noc", DeprecationWarning, stacklevel=2)
    return getattr(_noc, name)

"""Stop requests in a sweep's worker processes: shared by the points' runs (meshsim.sweep.execute)
and the cluster's workers (meshsim.sweep.cluster installs `_stop_all` as their Ctrl-C handler)."""

from __future__ import annotations

import collections

# Stop requests in a worker process: every run (Ctrl-C reached the worker of a cluster this process
# started), or the runs of one sweep (its client asked, by token). Read between kernel calls.
_STOP = {"all": False, "tokens": set()}
# Points of each sweep token running in this process, so that a stopping sweep can wait for them to
# close their files before it shuts its cluster down.
_RUNNING = collections.Counter()


def _request_stop(token: str) -> None:
    _STOP["tokens"].add(token)


def _running(token: str) -> int:
    return _RUNNING[token]


def _stop_all(signum, frame) -> None:
    _STOP["all"] = True

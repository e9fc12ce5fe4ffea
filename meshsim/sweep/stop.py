"""Stop requests in a sweep's worker processes: shared by the points' runs (meshsim.sweep.execute)
and the cluster's workers (meshsim.sweep.cluster installs `stop_all` as their Ctrl-C handler)."""

from __future__ import annotations

import collections

# Stop requests in a worker process: every run (Ctrl-C reached the worker of a cluster this process
# started), or the runs of one sweep (its client asked, by token). Read between kernel calls.
STOP_REQUESTS = {"all": False, "tokens": set()}
# Points of each sweep token running in this process, so that a stopping sweep can wait for them to
# close their files before it shuts its cluster down.
RUNNING = collections.Counter()


def request_stop(token: str) -> None:
    STOP_REQUESTS["tokens"].add(token)


def running_points(token: str) -> int:
    return RUNNING[token]


def stop_all(signum, frame) -> None:
    STOP_REQUESTS["all"] = True

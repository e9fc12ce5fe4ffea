"""Two levels of interconnect, shared by the machines that span chips (docs/rdu.md and docs/ipu.md,
"Topology"): chips numbered in order fill nodes of a fixed size, and a movement that several groups
of chips make at once uses the node's links only when every group lies in one node."""

from __future__ import annotations


def node_link(groups, per_node: int, inside: tuple, between: tuple) -> tuple:
    """`inside` (the node's links) when every group of chip numbers in `groups` lies in one node of
    `per_node` consecutive numbers, else `between` (a ring is as fast as its slowest hop, and a
    step waits for its slowest group)."""
    if all(len({c // per_node for c in g}) <= 1 for g in groups):
        return inside
    return between

"""The ipu's state between kernel calls: the pipeline schedule stepped through kernels.ipu, some
steps per call (docs/ipu.md, "The pipeline")."""

from __future__ import annotations

import numpy as np

from kernels import ipu as K

from ..compiled import call
from .compiler import IpuProgram


class IpuSim:
    """The schedule's state between kernel calls: steps done, the clock, and the sums."""

    def __init__(self, prog: IpuProgram):
        self.prog = prog
        self.steps_done = 0
        self.cycle = 0
        self.count = np.zeros(len(prog.templates), np.int64)
        self.shares = np.zeros(K.N_SH, np.int64)
        self.latencies = []

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.prog.spec.steps

    def advance(self, max_steps: int):
        """Run up to `max_steps` more steps; returns their (superstep rows, pipeline rows, latencies)."""
        k = min(max_steps, self.prog.spec.steps - self.steps_done)
        # the kernel adds to copies: the state moves all at once, after it returns (a Ctrl-C in
        # between leaves the state of the steps before)
        count, shares = self.count.copy(), self.shares.copy()
        end, rows = run_steps(self.prog, self.steps_done, k, self.cycle, count, shares)
        self.cycle, self.count, self.shares, self.steps_done = end, count, shares, self.steps_done + k
        self.latencies.append(rows[2])
        return rows

    def tile_busy(self) -> np.ndarray:
        """Every tile's busy cycles over the steps done, int64[stages, tiles]."""
        p = self.prog
        out = np.zeros((p.stages, p.spec.tiles), np.int64)
        stage = np.array([t.stage for t in p.templates], np.int64)
        for s in range(p.stages):
            rows = np.flatnonzero(stage == s)
            out[s] = self.count[rows] @ p.busy[rows]
        return out


def run_steps(prog: IpuProgram, first: int, k: int, start: int, count, shares):
    """Steps first .. first + k - 1 of the schedule from cycle `start` (kernels.ipu.run_steps, adding
    to `count` and `shares`); returns (end cycle, (superstep rows, pipeline rows, latencies))."""
    ss = np.zeros((k * prog.rows_per_step, K.N_SS), np.int64)
    pl = np.zeros((k * prog.pipeline_rows_per_step, K.N_PL), np.int64)
    lat = np.zeros(k * prog.spec.microbatches, np.int64)
    end = call(K.run_steps, first_step=first, n_steps=k, start=start, n=prog.stages, m=prog.spec.microbatches,
               training=prog.spec.training, fwd_ptr=prog.fwd_ptr, fwd_idx=prog.fwd_idx, bwd_ptr=prog.bwd_ptr,
               bwd_idx=prog.bwd_idx, t_comp=prog.t_comp, t_sync=prog.t_sync, t_exch=prog.t_exch, io0=prog.io0,
               transfer=prog.transfer, allreduce=prog.allreduce, update=prog.update, count=count, out_ss=ss,
               out_pl=pl, out_lat=lat, shares=shares, interleaved=prog.spec.interleaved)
    return int(end), (ss, pl, lat)


def stage_times(prog: IpuProgram) -> np.ndarray:
    """Each stage's cycles per micro-batch, forward plus backward (token ids included), int64[stages]."""
    out = prog.stage_cycles(0) + (prog.stage_cycles(1) if prog.spec.training else 0)
    out[0] += prog.io0
    return out

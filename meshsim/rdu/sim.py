"""The rdu's state between kernel calls: a compiled program stepped through kernels.rdu, a chunk of
intervals per call (docs/rdu.md, "Implementation notes")."""

from __future__ import annotations

import numpy as np

from kernels import rdu as K

from ..compiled import call
from .compiler import RduProgram


class RduSim:
    """Steps a compiled program through the kernel, a chunk of intervals per call.

    After `advance`, `out_start[:n]`, `out_cycles[:n]`, `out_series[:n]` and `out_stage_busy[:n]`
    hold the intervals just recorded (docs/rdu.md, "Result file"); `finish`, `busy`, `ddr_bytes` and
    `tile_latency` the running totals; `cycle` the cycles done.
    """

    def __init__(self, prog: RduProgram, chunk: int = 65_536):
        self.prog = prog
        chips = prog.instance.shape[0]
        s = max(1, int(prog.section[:, K.SE_NSTAGES].max())) if len(prog.section) else 1
        max_inst = prog.instance.shape[1]
        max_tiles = int(prog.section[:, K.SE_TILES].max()) if len(prog.section) else 1
        self.cs, self.started, self.done, self.left, self.tile_start, self.clock = K.new_state(
            n_chips=chips, max_stages=s, max_tiles=max_tiles, n_instances=prog.n_instances,
            switch_cycles=prog.switch_cycles)
        self.finish = np.full((chips, max_inst), -1, np.int64)
        self.busy = np.zeros((chips, max_inst, s, 2), np.int64)
        self.ddr_bytes = np.zeros(chips, np.int64)
        offsets = np.zeros((chips, max_inst), np.int64)
        n = 0
        for c in range(chips):
            for k in range(int(prog.n_instances[c])):
                offsets[c, k] = n
                n += int(prog.section[prog.instance[c, k, K.IN_SECTION], K.SE_TILES])
        self.tile_offset = offsets
        self.tile_latency = np.full(n, -1, np.int64)
        self.out_start = np.zeros(chunk, np.int64)
        self.out_cycles = np.zeros(chunk, np.int64)
        self.out_series = np.zeros((chunk, chips, K.N_SR), np.int64)
        self.out_stage_busy = np.zeros((chunk, chips, s), np.int64)
        self.finished = bool((prog.n_instances == 0).all())
        self.intervals = 0

    @property
    def cycle(self) -> int:
        return int(self.clock[0])

    def advance(self) -> int:
        """Run up to one chunk of intervals; returns how many were recorded. Sets `finished`."""
        p = self.prog
        n, status = call(
            K.run_intervals, stage=p.stage, section=p.section, instance=p.instance, n_instances=p.n_instances,
            buffer_tiles=p.buffer_tiles, switch_cycles=p.switch_cycles, prefetch=p.prefetch, burst_bytes=p.burst_bytes,
            bytes_per_kcycle=p.ddr_bytes_per_kcycle, cs=self.cs, started=self.started, done=self.done, left=self.left,
            tile_start=self.tile_start, clock=self.clock, tile_offset=self.tile_offset, finish=self.finish,
            busy=self.busy, ddr_bytes=self.ddr_bytes, tile_latency=self.tile_latency, out_start=self.out_start,
            out_cycles=self.out_cycles, out_series=self.out_series, out_stage_busy=self.out_stage_busy)
        if status == K.STUCK:
            raise RuntimeError(f"rdu kernel stuck at cycle {self.cycle}: no chip can move (a program error)")
        self.finished = status == K.FINISHED
        self.intervals += n
        return n

    def run(self):
        """Run to the end; returns (starts, cycles, series, stage_busy) of every interval."""
        parts = []
        while not self.finished:
            n = self.advance()
            parts.append((self.out_start[:n].copy(), self.out_cycles[:n].copy(), self.out_series[:n].copy(),
                          self.out_stage_busy[:n].copy()))
        if not parts:
            s = self.out_series.shape
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0,) + s[1:], np.int64),
                    np.zeros((0,) + self.out_stage_busy.shape[1:], np.int64))
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))

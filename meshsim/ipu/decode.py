"""Generation on the ipu: the ipu's `decode` workload (docs/ipu.md, "Generation"). A model sharded
over the IPUs of a replica generates workload.output_tokens tokens after a prompt of workload.context,
one step a token, as Graphcore's PopTransformer runs it: a loop on the chips, each step one token a
sequence through every IPU in turn and back to IPU 0's output head, over a key-value cache of a static
length kept in the tiles' memory.

Every step is the same compiled program (the cache's length is static), so a step's cycles are
computed once, by the ipu compiler (meshsim.ipu.compiler), and the generation is that step repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import metrics
from ..errors import InputError
from ..machine import TokenRun
from ..output import TokenTables, describe
from .compiler import MAX_CYCLES, IpuProgram, bytes_cycles, cache_bytes, compile_scenario

#: Bytes of a token id.
ID_BYTES = 4


@dataclass(frozen=True)
class DecodeProgram:
    """A generation: the compiled step and what the schedule adds to it (docs/ipu.md, "Generation")."""

    prog: IpuProgram
    step_cycles: int  # one step: every IPU's supersteps, one after another, and the transfers
    stage_cycles: np.ndarray  # int64[stages]: each IPU's supersteps in a step
    transfers: int  # the transfers of a step: n - 1 forward and the hidden state back to IPU 0
    prompt_io: int  # the prompt's token ids streamed in before the first step
    context: int
    output_tokens: int
    microbatches: int = 1  # m: micro-batches in the ring ("A pipelined generation")
    forward_transfer: int = 0  # x_f: a micro-batch's hidden state from one IPU to the next
    back_transfer: int = 0  # x_b: from the last IPU back to IPU 0

    @property
    def spec(self):
        return self.prog.spec

    @property
    def steps(self) -> int:
        """Steps (passes of the ring) of each micro-batch's generation: one a prompt token (the last one gives
        the first output token), then one for each output token after the first."""
        return self.context + self.output_tokens - 1

    @property
    def rows(self) -> int:
        """Rows of the tokens/ table: every output token of every micro-batch."""
        return self.output_tokens * self.microbatches

    def token_end(self, k: int) -> int:
        """The cycle output token k (from 0) is known: the end of step context - 1 + k (one micro-batch)."""
        return self.prompt_io + (self.context + k) * self.step_cycles

    # -- a pipelined generation (docs/ipu.md, "A pipelined generation"): m micro-batches in lockstep pipeline
    #    steps, micro-batch j running its pass i on IPU s in pipeline step j + n i + s

    @property
    def pipeline_steps(self) -> int:
        return self.microbatches - 1 + self.prog.stages * self.steps

    def pipeline_step_cycles(self, q: int) -> int:
        """Pipeline step q's cycles: its busiest running IPU's part, and the longest transfer after it."""
        n, m = self.prog.stages, self.microbatches
        c, x = 0, 0
        for s in range(n):
            j = (q - s) % n
            if j < m and 0 <= q - s - j < n * self.steps:
                c = max(c, int(self.stage_cycles[s]))
                if n > 1:
                    x = max(x, self.back_transfer if s == n - 1 else self.forward_transfer)
        return c + x

    def pipeline_end(self, p: int) -> int:
        """The cycle pipeline step p ends (p = -1: the prompt's ids streamed, before the first). Between the
        fill and the drain a pipeline step's IPUs depend on p mod n alone, so whole periods of n are summed
        at once."""
        n, m = self.prog.stages, self.microbatches
        lo, hi = n + m - 2, n * self.steps  # the steady pipeline steps are lo ... hi - 1
        total = self.prompt_io
        if p < lo or hi - lo < n:
            return total + sum(self.pipeline_step_cycles(q) for q in range(p + 1))
        total += sum(self.pipeline_step_cycles(q) for q in range(lo))
        upto = min(p + 1, hi)
        periods = (upto - lo) // n
        total += periods * sum(self.pipeline_step_cycles(q) for q in range(lo, lo + n))
        total += sum(self.pipeline_step_cycles(q) for q in range(lo + periods * n, upto))
        return total + sum(self.pipeline_step_cycles(q) for q in range(hi, p + 1))

    def row_step(self, r: int) -> int:
        """The pipeline step at whose end row r (token r // m of micro-batch r mod m) is known."""
        k, j = divmod(r, self.microbatches)
        n = self.prog.stages
        return j + n * (self.context - 1 + k) + n - 1

    def row_end(self, r: int) -> int:
        """The cycle row r's token is known."""
        if self.microbatches == 1:
            return self.token_end(r)
        return self.pipeline_end(self.row_step(r))

    def row_start(self, r: int) -> int:
        """The cycle row r's pass began on IPU 0 (0 for a first token)."""
        k = r // self.microbatches
        if k == 0:
            return 0
        if self.microbatches == 1:
            return self.token_end(k - 1)
        return self.pipeline_end(self.row_step(r) - self.prog.stages)

    def passes_done(self, r: int) -> np.ndarray:
        """int64[m]: each micro-batch's passes completed once row r is known (row -1: none)."""
        m, n = self.microbatches, self.prog.stages
        if r < 0:
            return np.zeros(m, np.int64)
        e = self.row_step(r)
        return np.array([min(self.steps, max(0, (e - j + 1) // n)) for j in range(m)], np.int64)

    def filled_bytes(self, r: int) -> np.ndarray:
        """int64[stages]: the cache's filled bytes on each IPU once row r is known: every micro-batch's
        positions, one a pass completed (with one micro-batch: the context + k positions of token k)."""
        spec, done = self.spec, self.passes_done(r)
        return np.array([sum(cache_bytes(spec, len(layers), int(d), 1) for d in done)
                         for layers in self.prog.stage_layers], np.int64)


def decode_program(scenario) -> DecodeProgram:
    """The generation of a validated ipu decode scenario; InputError (naming the scenario) when a tile
    does not hold its share of the weights, the cache and the activations."""
    prog = compile_scenario(scenario)
    spec = prog.spec
    n = prog.stages
    stage = prog.stage_cycles(0)
    back = 0
    if n > 1:
        # the hidden state back from the last IPU to IPU 0, whose head gives the next token
        t = spec.tensor_parallel
        gbps, sync = spec.link([[spec.ipu_number(ti, n - 1, ri), spec.ipu_number(ti, 0, ri)]
                                for ti in range(t) for ri in range(spec.replicas)])
        m = spec.micro
        back = sync + bytes_cycles(m.tokens * m.hidden_size * m.element_bytes, gbps, spec.clock_ghz)
    transfers = (n - 1) * prog.transfer + back
    step = int(stage.sum()) + transfers
    mbs = spec.microbatches
    w = scenario.values["workload"]
    steps = w["context"] + w["output_tokens"] - 1
    if step * steps > MAX_CYCLES:
        raise InputError(f"{scenario.path or '<scenario>'}: workload.output_tokens = {w['output_tokens']:,}: "
                         f"{steps:,} steps of {step:,} cycles pass {MAX_CYCLES:,} cycles; "
                         "fewer tokens (workload.context, workload.output_tokens)")
    io = bytes_cycles(ID_BYTES * mbs * spec.micro.batch * w["context"], spec.streaming_memory_gbps, spec.clock_ghz)
    dp = DecodeProgram(prog=prog, step_cycles=step, stage_cycles=stage, transfers=transfers, prompt_io=io,
                       context=w["context"], output_tokens=w["output_tokens"], microbatches=mbs,
                       forward_transfer=prog.transfer if n > 1 else 0, back_transfer=back)
    if mbs > 1 and dp.row_end(dp.rows - 1) > MAX_CYCLES:
        raise InputError(f"{scenario.path or '<scenario>'}: workload.output_tokens = {w['output_tokens']:,}: "
                         f"{dp.pipeline_steps:,} pipeline steps pass {MAX_CYCLES:,} cycles; "
                         "fewer tokens (workload.context, workload.output_tokens)")
    return dp


def step_busy(prog: IpuProgram) -> np.ndarray:
    """int64[stages, tiles]: each tile's busy cycles in one step (its stage's supersteps summed)."""
    out = np.zeros((prog.stages, prog.spec.tiles), np.int64)
    for s in range(prog.stages):
        idx = prog.fwd_idx[prog.fwd_ptr[s]:prog.fwd_ptr[s + 1]]
        out[s] = prog.busy[idx].sum(axis=0)
    return out


#: The tokens/ table's columns: name -> (units, description).
TOKEN_COLUMNS = {
    "token": ("1", "output token, from 0"),
    "start_cycle": ("cycle", "cycle its step starts (token 0: the first prompt step's)"),
    "cycles": ("cycles", "from start_cycle to the token's being known (token 0: the time to first token)"),
    "context": ("tokens", "cache positions filled once it is known"),
}

#: A pipelined generation's tokens/ table: one row per output token of each micro-batch.
PIPELINED_COLUMNS = {"token": TOKEN_COLUMNS["token"],
                     "microbatch": ("1", "micro-batch of the row's sequences, from 0"),
                     "start_cycle": ("cycle", "cycle its pass began on IPU 0 (token 0: 0)"),
                     "cycles": TOKEN_COLUMNS["cycles"],
                     "context": ("tokens", "cache positions of its micro-batch filled once it is known")}


def token_columns(dp: DecodeProgram) -> dict:
    """The tokens/ table's columns of a generation (docs/ipu.md, "Generation", "A pipelined generation")."""
    return PIPELINED_COLUMNS if dp.microbatches > 1 else TOKEN_COLUMNS


class IpuDecodeState:
    """A generation between calls: output tokens done."""

    def __init__(self, dp: DecodeProgram):
        self.dp = dp
        self.tokens_done = 0  # rows of the tokens/ table: output tokens, of every micro-batch

    @property
    def cycle(self) -> int:
        return self.dp.row_end(self.tokens_done - 1) if self.tokens_done else 0

    def advance(self, n: int) -> tuple:
        """Up to n more rows (output tokens, of every micro-batch in turn): (their rows of the tokens/ table;
        the cache's filled bytes per IPU after each)."""
        dp = self.dp
        rs = range(self.tokens_done, min(dp.rows, self.tokens_done + n))
        rows = []
        for r in rs:
            k, j = divmod(r, dp.microbatches)
            start, end = dp.row_start(r), dp.row_end(r)
            rows.append((k, start, end - start, dp.context + k) if dp.microbatches == 1 else
                        (k, j, start, end - start, dp.context + k))
        caches = [dp.filled_bytes(r) for r in rs]
        self.tokens_done += len(rs)
        return (np.array(rows, np.int64).reshape(len(rows), len(token_columns(dp))),
                np.array(caches, np.int64).reshape(len(rows), dp.prog.stages))

    @property
    def finished(self) -> bool:
        return self.tokens_done >= self.dp.rows

    def steps_run(self) -> int:
        """Passes of the ring run so far, every micro-batch's (one micro-batch: the prompt's steps, with the
        first token, then one a token)."""
        return int(self.dp.passes_done(self.tokens_done - 1).sum())

    def latencies(self) -> np.ndarray:
        """int64: the time between two consecutive tokens of one micro-batch, over the rows so far."""
        dp, m = self.dp, self.dp.microbatches
        ends = np.array([dp.row_end(r) for r in range(self.tokens_done)], np.int64)
        return np.concatenate([np.diff(ends[j::m]) for j in range(m)]) if self.tokens_done > m else \
            np.zeros(0, np.int64)


class IpuDecodeWriter(TokenTables):
    """An ipu generation's file: the tokens/ table, the cache's bytes per IPU after each token, the step's
    superstep templates, and per-tile busy cycles and memory."""

    def __init__(self, final_path, scenario, dp: DecodeProgram, *, threads: int, compression_level: int):
        from .output import write_templates

        super().__init__(final_path, scenario, "ipu", threads, 0, compression_level)
        f, prog = self.f, dp.prog
        n, tiles = prog.stages, prog.spec.tiles
        f.attrs["stages"] = n
        self.stage = self._scale(f, "stage", np.arange(n, dtype=np.int32), "1", "IPU (pipeline stage) of a replica")
        self.tile = self._scale(f, "tile", np.arange(tiles, dtype=np.int32), "1", "tile of an IPU")
        self.template = self._scale(f, "template", np.arange(len(prog.templates), dtype=np.int64), "1",
                                    "superstep template (row of templates/)")
        if dp.microbatches > 1:
            self._tokens(PIPELINED_COLUMNS, "one row per output token of each micro-batch, in the order they are "
                                            "known (docs/ipu.md, \"A pipelined generation\")", "output token")
        else:
            self._tokens(TOKEN_COLUMNS, "one row per output token, in order (docs/ipu.md, \"Generation\")",
                         "output token")
        write_templates(self, prog)
        occ = f["occupancy"]
        self.cache = occ.create_dataset("cache_bytes", shape=(0, n), maxshape=(None, n), dtype=np.int64,
                                        chunks=(max(1, 8192 // n), n), **self.comp)
        describe(self.cache, "bytes", "bytes of the key-value cache filled on each IPU once each token is known "
                                      "(each IPU's tiles hold an even share)")
        self.cache.dims[0].attach_scale(self.token)
        self.cache.dims[1].attach_scale(self.stage)
        u = f.create_group("units")
        u.attrs["description"] = "per-tile totals over the steps run (units = the tiles of every IPU of a replica)"
        ds = u.create_dataset("memory_bytes", data=prog.memory, chunks=True, **self.comp)
        describe(ds, "bytes", "SRAM each tile uses: code, weights, activations and its share of the key-value "
                              "cache's whole static buffer")
        ds.dims[0].attach_scale(self.stage)
        ds.dims[1].attach_scale(self.tile)
        self.tile_busy = u.create_dataset("tile_busy_cycles", data=np.zeros(prog.memory.shape, np.int64),
                                          chunks=True, **self.comp)
        describe(self.tile_busy, "cycles", "cycles each tile computed over the steps run")
        self.tile_busy.dims[0].attach_scale(self.stage)
        self.tile_busy.dims[1].attach_scale(self.tile)
        f.create_group("summary").attrs["description"] = "the run's figures (docs/ipu.md, \"Generation\")"

    def write_totals(self, tile_busy) -> None:
        self.tile_busy[...] = np.asarray(tile_busy, np.int64)


def summarise(dp: DecodeProgram, state: IpuDecodeState, wall: float, kernel_seconds: float, threads: int,
              start_cycle: int = 0) -> dict:
    """A generation's figures: the stable names (docs/design.md, "Result files") and its own (docs/ipu.md,
    "Generation")."""
    nan = float("nan")
    prog, spec = dp.prog, dp.spec
    n, done, cycles = prog.stages, state.tokens_done, state.cycle
    steps = state.steps_run()
    busy = step_busy(prog) * steps
    ms = 1e3 / (spec.clock_ghz * 1e9)
    # sharded, every step is the same: the time per output token is the step's, after the first token;
    # pipelined, the time between two tokens of one micro-batch
    lat = np.full(max(0, done - 1), dp.step_cycles, np.int64) if dp.microbatches == 1 else state.latencies()
    la = metrics.sample_latency_stats(lat)
    per_step = prog.t_comp + prog.t_sync + prog.t_exch
    parts = {name: int(a.sum()) for name, a in (("compute", prog.t_comp), ("sync", prog.t_sync),
                                                 ("exchange", prog.t_exch))}
    filled = dp.filled_bytes(done - 1) if done else np.zeros(n, np.int64)
    cache = metrics.load_balance(filled.astype(np.float64)) if filled.any() else {"li": nan}
    st = dp.stage_cycles
    stage_lb = metrics.load_balance(st)
    cap = spec.tile_sram_kib * 1024
    sequences = spec.micro.batch * spec.replicas * dp.microbatches
    per_token = float(lat.mean()) if lat.size else float(dp.step_cycles)
    flops = sum(t.flops for t in prog.templates) * steps
    return {
        "cycles": cycles,
        "n_units": n * spec.tiles,
        **metrics.balance_figures(busy, cycles),
        "flop_utilization": flops / (spec.peak_flops_per_cycle * n * cycles) if cycles else nan,
        **metrics.latency_figures(la),
        "injected": done,
        "refused": 0,
        "completed": done,
        "in_system_at_end": 0,
        "migrated": 0,
        "preset": spec.preset,
        "ipus": n * spec.replicas * spec.tensor_parallel,
        "stages": n,
        "replicas": spec.replicas,
        "tensor_parallel": spec.tensor_parallel,
        "decode_tokens": done // dp.microbatches,
        "decode_steps": steps,
        "decode_context_start": dp.context,
        "decode_context_end": dp.context + done // dp.microbatches - 1 if done else dp.context,
        "microbatches": dp.microbatches,
        "pipeline_steps": dp.pipeline_steps if dp.microbatches > 1 else 0,
        "cache_positions": spec.cache_tokens,
        "sequences": sequences,
        "step_cycles": dp.step_cycles,
        "time_to_first_token_ms": dp.row_end(dp.microbatches - 1) * ms,
        "time_per_token_ms_mean": float(lat.mean()) * ms if lat.size else nan,
        "time_per_token_ms_p50": la["p50"] * ms if lat.size else nan,
        "time_per_token_ms_p99": la["p99"] * ms if lat.size else nan,
        "tokens_per_second": 1e3 / (per_token * ms),
        "tokens_per_second_total": sequences * 1e3 / (per_token * ms),
        "step_compute_fraction": parts["compute"] / dp.step_cycles,
        "step_sync_fraction": parts["sync"] / dp.step_cycles,
        "step_exchange_fraction": parts["exchange"] / dp.step_cycles,
        "step_transfer_fraction": dp.transfers / dp.step_cycles,
        "superstep_cycles_mean": float(per_step.mean()),
        "superstep_templates": len(prog.templates),
        "stage_li": stage_lb["li"],
        "stage_cycles_max": int(st.max()),
        "stage_cycles_min": int(st.min()),
        "busiest_stage": int(np.argmax(st)),
        "cache_li": cache["li"],
        "cache_bytes_max_stage": int(filled.max()),
        "cache_bytes_buffer_max_tile": int(prog.memory_parts["cache"].max()),
        "cache_max_stage": int(np.argmax(filled)),
        "memory_max_bytes": int(prog.memory.max()),
        "memory_mean_bytes": float(prog.memory.mean()),
        "memory_max_fraction": int(prog.memory.max()) / cap,
        "flops": flops if flops < 2**63 else float(flops),
        "clock_ghz": spec.clock_ghz,
        "simulated_seconds": cycles * ms / 1e3,
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds,
        "pe_cycles_per_second": n * spec.tiles * (cycles - start_cycle) / kernel_seconds if kernel_seconds else nan,
        "threads": threads,
    }


class IpuDecodeRun(TokenRun):
    """An ipu generation between calls: some tokens a call, their rows written as they come."""

    def __init__(self, scenario, dp: DecodeProgram, per_call: int | None = None):
        super().__init__(IpuDecodeState(dp), dp.rows, per_call or 4096)
        self.scenario = scenario
        self.dp = dp

    def open_writer(self, path, scenario, threads: int) -> IpuDecodeWriter:
        return IpuDecodeWriter(path, scenario, self.dp, threads=threads,
                               compression_level=scenario.get("output", "compression_level"))

    def prepare_flush(self, writer) -> None:
        writer.write_totals(step_busy(self.dp.prog) * self.state.steps_run())

    def summarise(self, timing) -> dict:
        return summarise(self.dp, self.state, timing.wall, timing.kernel_total, timing.threads, timing.start_cycle)

    def write_final(self, writer) -> None:
        writer.write_totals(step_busy(self.dp.prog) * self.state.steps_run())

    def checkpoint(self) -> tuple:
        return dict(tokens_done=self.state.tokens_done), {}

    def restore(self, values: dict, arrays: dict, writer) -> None:
        self.state.tokens_done = int(values["tokens_done"])
        if writer.n != self.state.tokens_done:
            raise InputError(f"{writer.path}: holds {writer.n} tokens and its checkpoint {self.state.tokens_done}; "
                             "the run cannot resume")


def summary_lines(s: dict) -> list:
    """The one-screen summary of an ipu generation."""
    from ..report import fmt as _f

    m = int(s.get("microbatches", 1))
    how = (f"pipelined over {_f(s['stages'])} in {m} micro-batches, {_f(s['pipeline_steps'])} pipeline steps" if m > 1
           else f"sharded over {_f(s['stages'])}")
    return [
        f"generation    {_f(s['decode_tokens'])} tokens for {_f(s['sequences'])} sequence(s) on {_f(s['ipus'])} "
        f"IPU(s) ({how}), context {_f(s['decode_context_start'])} -> "
        f"{_f(s['decode_context_end'])} of a static cache of {_f(s['cache_positions'])} positions",
        f"time          first token {_f(s['time_to_first_token_ms'])} ms ({_f(s['decode_context_start'])} prompt "
        f"steps); per token mean {_f(s['time_per_token_ms_mean'])} ms, p50 {_f(s['time_per_token_ms_p50'])}, p99 "
        f"{_f(s['time_per_token_ms_p99'])}; {_f(s['tokens_per_second'])} tokens/s per sequence, "
        f"{_f(s['tokens_per_second_total'])} in all",
        f"a step        {_f(s['step_cycles'])} cycles: compute {_f(s['step_compute_fraction'])}, sync "
        f"{_f(s['step_sync_fraction'])}, exchange {_f(s['step_exchange_fraction'])}, transfers between IPUs "
        f"{_f(s['step_transfer_fraction'])}; {_f(s['superstep_templates'])} supersteps",
        f"stages        LI {_f(s['stage_li'])}" + (" (one IPU works at a time)" if m == 1 else "")
        + f"; busiest IPU {_f(s['busiest_stage'])} "
        f"({_f(s['stage_cycles_max'])} cycles a step)",
        f"cache         LI {_f(s['cache_li'])} over the IPUs; IPU {_f(s['cache_max_stage'])} holds the most, "
        f"{_f(s['cache_bytes_max_stage'])} bytes filled; its static buffer takes up to "
        f"{_f(s['cache_bytes_buffer_max_tile'])} bytes a tile",
        f"LI            {_f(s['li'])} over {_f(s['n_units'])} tiles (mean/max busy; Jain {_f(s['jain_index'])}); "
        f"busy {_f(s['utilization'])} of tile-cycles; FLOP utilisation {_f(s['flop_utilization'])}",
        f"memory        fullest tile {_f(s['memory_max_bytes'])} bytes, {_f(s['memory_max_fraction'])} of its SRAM",
        f"speed         {_f(s['wall_seconds'], 3)} s wall",
    ]

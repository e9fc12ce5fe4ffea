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

    @property
    def spec(self):
        return self.prog.spec

    @property
    def steps(self) -> int:
        """Steps of the whole generation: one a prompt token (the last one gives the first output
        token), then one for each output token after the first."""
        return self.context + self.output_tokens - 1

    def token_end(self, k: int) -> int:
        """The cycle output token k (from 0) is known: the end of step context - 1 + k."""
        return self.prompt_io + (self.context + k) * self.step_cycles

    def filled_bytes(self, k: int) -> np.ndarray:
        """int64[stages]: the cache's filled bytes on each IPU once output token k is known: the context + k
        positions of the tokens the steps so far took."""
        spec = self.spec
        return np.array([cache_bytes(spec, len(layers), self.context + k) for layers in self.prog.stage_layers],
                        np.int64)


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
    w = scenario.values["workload"]
    steps = w["context"] + w["output_tokens"] - 1
    if step * steps > MAX_CYCLES:
        raise InputError(f"{scenario.path or '<scenario>'}: workload.output_tokens = {w['output_tokens']:,}: "
                         f"{steps:,} steps of {step:,} cycles pass {MAX_CYCLES:,} cycles; "
                         "fewer tokens (workload.context, workload.output_tokens)")
    io = bytes_cycles(ID_BYTES * spec.micro.batch * w["context"], spec.streaming_memory_gbps, spec.clock_ghz)
    return DecodeProgram(prog=prog, step_cycles=step, stage_cycles=stage,
                         transfers=transfers, prompt_io=io, context=w["context"], output_tokens=w["output_tokens"])


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


class IpuDecodeState:
    """A generation between calls: output tokens done."""

    def __init__(self, dp: DecodeProgram):
        self.dp = dp
        self.tokens_done = 0

    @property
    def cycle(self) -> int:
        return self.dp.token_end(self.tokens_done - 1) if self.tokens_done else 0

    def advance(self, n: int) -> tuple:
        """Up to n more output tokens: (their rows of the tokens/ table; the cache's filled bytes per
        IPU after each)."""
        dp = self.dp
        ks = range(self.tokens_done, min(dp.output_tokens, self.tokens_done + n))
        rows = []
        for k in ks:
            start = 0 if k == 0 else dp.token_end(k - 1)
            rows.append((k, start, dp.token_end(k) - start, dp.context + k))
        caches = [dp.filled_bytes(k) for k in ks]
        self.tokens_done += len(ks)
        return (np.array(rows, np.int64).reshape(len(rows), len(TOKEN_COLUMNS)),
                np.array(caches, np.int64).reshape(len(rows), dp.prog.stages))

    @property
    def finished(self) -> bool:
        return self.tokens_done >= self.dp.output_tokens

    def steps_run(self) -> int:
        """Steps run so far: the prompt's (with the first token), then one a token."""
        return self.dp.context + self.tokens_done - 1 if self.tokens_done else 0


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
        self._tokens(TOKEN_COLUMNS, "one row per output token, in order (docs/ipu.md, \"Generation\")", "output token")
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
    # every step is the same: the time per output token is the step's, after the first token
    lat = np.full(max(0, done - 1), dp.step_cycles, np.int64)
    la = metrics.sample_latency_stats(lat)
    per_step = prog.t_comp + prog.t_sync + prog.t_exch
    parts = {name: int(a.sum()) for name, a in (("compute", prog.t_comp), ("sync", prog.t_sync),
                                                 ("exchange", prog.t_exch))}
    filled = dp.filled_bytes(done - 1) if done else np.zeros(n, np.int64)
    cache = metrics.load_balance(filled.astype(np.float64)) if filled.any() else {"li": nan}
    st = dp.stage_cycles
    stage_lb = metrics.load_balance(st)
    cap = spec.tile_sram_kib * 1024
    sequences = spec.micro.batch * spec.replicas
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
        "decode_tokens": done,
        "decode_steps": steps,
        "decode_context_start": dp.context,
        "decode_context_end": dp.context + done - 1 if done else dp.context,
        "cache_positions": spec.cache_tokens,
        "sequences": sequences,
        "step_cycles": dp.step_cycles,
        "time_to_first_token_ms": dp.token_end(0) * ms,
        "time_per_token_ms_mean": float(lat.mean()) * ms if lat.size else nan,
        "time_per_token_ms_p50": la["p50"] * ms if lat.size else nan,
        "time_per_token_ms_p99": la["p99"] * ms if lat.size else nan,
        "tokens_per_second": 1e3 / (dp.step_cycles * ms),
        "tokens_per_second_total": sequences * 1e3 / (dp.step_cycles * ms),
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
        super().__init__(IpuDecodeState(dp), dp.output_tokens, per_call or 4096)
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

    return [
        f"generation    {_f(s['decode_tokens'])} tokens for {_f(s['sequences'])} sequence(s) on {_f(s['ipus'])} "
        f"IPU(s) (sharded over {_f(s['stages'])}), context {_f(s['decode_context_start'])} -> "
        f"{_f(s['decode_context_end'])} of a static cache of {_f(s['cache_positions'])} positions",
        f"time          first token {_f(s['time_to_first_token_ms'])} ms ({_f(s['decode_context_start'])} prompt "
        f"steps); per token mean {_f(s['time_per_token_ms_mean'])} ms, p50 {_f(s['time_per_token_ms_p50'])}, p99 "
        f"{_f(s['time_per_token_ms_p99'])}; {_f(s['tokens_per_second'])} tokens/s per sequence, "
        f"{_f(s['tokens_per_second_total'])} in all",
        f"a step        {_f(s['step_cycles'])} cycles: compute {_f(s['step_compute_fraction'])}, sync "
        f"{_f(s['step_sync_fraction'])}, exchange {_f(s['step_exchange_fraction'])}, transfers between IPUs "
        f"{_f(s['step_transfer_fraction'])}; {_f(s['superstep_templates'])} supersteps",
        f"stages        LI {_f(s['stage_li'])} (one IPU works at a time); busiest IPU {_f(s['busiest_stage'])} "
        f"({_f(s['stage_cycles_max'])} cycles a step)",
        f"cache         LI {_f(s['cache_li'])} over the IPUs; IPU {_f(s['cache_max_stage'])} holds the most, "
        f"{_f(s['cache_bytes_max_stage'])} bytes filled; its static buffer takes up to "
        f"{_f(s['cache_bytes_buffer_max_tile'])} bytes a tile",
        f"LI            {_f(s['li'])} over {_f(s['n_units'])} tiles (mean/max busy; Jain {_f(s['jain_index'])}); "
        f"busy {_f(s['utilization'])} of tile-cycles; FLOP utilisation {_f(s['flop_utilization'])}",
        f"memory        fullest tile {_f(s['memory_max_bytes'])} bytes, {_f(s['memory_max_fraction'])} of its SRAM",
        f"speed         {_f(s['wall_seconds'], 3)} s wall",
    ]

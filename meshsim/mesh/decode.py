"""Decode on the wafer: the mesh's `decode` workload (docs/decode.md). A generation of
workload.output_tokens tokens after workload.context cached ones, on a P x P region laid out as
WaferLLM lays it out, each token timed by the decode kernel (kernels/decode.py), the key-value
cache's rows kept by workload.kv_policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from kernels import decode as K

from .. import metrics
from ..compiled import call
from ..errors import InputError
from ..machine import TokenRun
from ..output import TokenTables, describe
from ..transformer import MLP_SHAPES, model_from_workload

#: The cache's policies (docs/decode.md, "The key-value cache").
POLICIES = ("shift", "append")


#: Routes the decode kernel takes besides its collectives' (docs/decode.md, "Routes and relays").
OTHER_ROUTES = 1


def default_group(p: int, levels: int = 2) -> int:
    """The tree's group when workload.decode_group is 0: the whole number nearest P ** (1 / K), sqrt(P) for
    two levels."""
    k = math.isqrt(p) if levels == 2 else int(round(p ** (1 / levels)))
    while k ** levels > p:  # k: the largest whole number whose K-th power is at most P, computed exactly
        k -= 1
    while (k + 1) ** levels <= p:
        k += 1
    # P ** (1 / K) >= k + 1/2 exactly when 2^K P >= (2 k + 1)^K, never equal (the right side is odd)
    return max(1, k + 1 if 2 ** levels * p >= (2 * k + 1) ** levels else k)


def tree_routes(levels: int) -> int:
    """Routes a router holds for a K-level tree: four a level and two for the broadcast on each axis, and
    the kernel's other (8 K + 5; WaferLLM's 21 at K = 2)."""
    return 2 * (4 * levels + 2) + OTHER_ROUTES


def routed_levels(levels: int, budget: int) -> int:
    """The levels that have routes within `budget`: the broadcast, the other route and level 1 first, then
    each level's eight while they last; the levels above are relayed."""
    return min(levels, (budget - tree_routes(0)) // 8)


@dataclass(frozen=True)
class DecodeSpec:
    """What the kernel and the cache need, from a validated scenario (docs/decode.md's names)."""

    p: int
    dp: int
    qp: int
    fp: int
    kp: int
    g: int
    heads: int
    n_layers: int
    group: int
    levels: int  # K: the collectives' tree levels (docs/decode.md, "A collective on a line")
    routed: int  # the levels within the route budget; those above are relayed ("Routes and relays")
    route_budget: int
    hop: int
    add: int
    phase: int
    rate_num: int
    rate_den: int
    context: int
    output_tokens: int
    policy: str
    element_bytes: int
    sram_bytes: int
    clock_ghz: float
    prefill: object = None  # meshsim.mesh.prefill.Prefill: the prompt's pass and the reshuffle
    regions: int = 1  # R: regions the layers are split over (docs/decode.md, "A model over several regions")
    batch: int = 1  # B: sequences decoding together ("More than one sequence")
    wafer: tuple | None = None  # (rows, cols) of the preset's usable fabric ("Placement on the wafer")

    @property
    def region_layers(self) -> tuple:
        """L_r: the layers of each region, the first n_layers mod R one more."""
        base, extra = divmod(self.n_layers, self.regions)
        return tuple(base + (1 if r < extra else 0) for r in range(self.regions))

    @property
    def most_layers(self) -> int:
        """L_0: the layers of the fullest region, which sets the memory and the shift."""
        return self.region_layers[0]

    @property
    def pass_cycles(self) -> int:
        """A token's hidden state from one region to the next: o + dp + h P (0 with one region)."""
        return self.phase + self.dp + self.hop * self.p if self.regions > 1 else 0

    @property
    def weight_bytes_per_pe(self) -> int:
        """Bytes of the weight blocks and the two norms' scales of every layer of the fullest region on one PE."""
        d, f = self.dp, self.fp
        return self.most_layers * (d * self.qp + d * d + d * self.g * f + f * d + 2 * d) * self.element_bytes

    @property
    def token_bytes_per_pe(self) -> int:
        """Bytes one cached token takes on each PE of its row: its keys' and values' slices, every layer of the
        fullest region."""
        return 2 * self.kp * self.most_layers * self.batch * self.element_bytes

    @property
    def row_capacity(self) -> int:
        """Tokens each row's PEs have room for beside the weights."""
        return max(0, self.sram_bytes - self.weight_bytes_per_pe) // self.token_bytes_per_pe

    @property
    def shift_cycles(self) -> int:
        """Cycles of one shift of the cache between rows: each moving row streams one token's keys and
        values of every layer to the row above (docs/decode.md, "The key-value cache")."""
        return self.phase + self.token_bytes_per_pe // self.element_bytes + self.hop

    def longest_context(self) -> int:
        """The most tokens the cache holds: every row full (shift), or the prompt's rows and the last
        row full (append)."""
        if self.policy == "shift":
            return self.p * self.row_capacity
        rows = spread(self.p, self.context)
        return int(rows[:-1].sum()) + self.row_capacity


def decode_spec(scenario) -> DecodeSpec:
    """The spec of a decode scenario; InputError where the weights do not fit the region's PEs, or the
    prompt's cache does not fit beside them."""
    m, w = scenario.values["machine"], scenario.values["workload"]
    model = model_from_workload(w, batch=1)  # one sequence's shape; B of them decode together
    p = int(m["rows"])
    levels = int(w["decode_tree_levels"])
    rate = Fraction(repr(float(m["pe_flops_per_cycle"]))) / 2
    q = model.attention_size + 2 * model.kv_size
    spec = DecodeSpec(p=p, dp=-(-model.hidden_size // p), qp=-(-q // p), fp=-(-model.ffn_size // p),
                      kp=-(-model.kv_size // p), g=MLP_SHAPES[model.mlp][0], heads=model.n_heads,
                      n_layers=model.n_layers, group=int(w["decode_group"]) or default_group(p, levels),
                      levels=levels, routed=routed_levels(levels, int(m["route_budget"])),
                      route_budget=int(m["route_budget"]),
                      hop=int(m["hop_latency_cycles"]), add=int(m["decode_add_cycles"]),
                      phase=int(m["decode_phase_cycles"]), rate_num=rate.numerator, rate_den=rate.denominator,
                      context=int(w["context"]), output_tokens=int(w["output_tokens"]), policy=str(w["kv_policy"]),
                      element_bytes=model.element_bytes, sram_bytes=int(m["sram_kib"]) * 1024,
                      clock_ghz=float(m["clock_ghz"]), regions=max(1, int(w.get("decode_regions", 1))),
                      batch=int(w["batch"]), wafer=_fabric(m))
    need = int(spread(p, spec.context + 1).max())
    if int(w.get("decode_regions", 1)) == 0:  # the fewest regions that hold the model and the first token
        spec = next((replace(spec, regions=r) for r in range(1, spec.n_layers + 1)
                     if replace(spec, regions=r).row_capacity >= need), replace(spec, regions=spec.n_layers))
    given = int(w.get("decode_regions", 1))
    where = f"workload.decode_regions = {given}" if given != 1 else f"machine.rows = {p}"
    more = ("use a larger region" if spec.regions == spec.n_layers else
            "use a larger region, or more regions (workload.decode_regions; 0: the fewest that hold the model)")
    if spec.weight_bytes_per_pe > spec.sram_bytes:
        raise InputError([f"{where}: the weights of {spec.most_layers} layer(s) need "
                          f"{spec.weight_bytes_per_pe:,} bytes on each PE of a {p} x {p} region, and a PE has "
                          f"{spec.sram_bytes:,} (machine.sram_kib); {more}"])
    if need > spec.row_capacity:
        raise InputError([f"workload.context = {spec.context:,}: the first token's cache needs {need:,} tokens on a "
                          f"row, and a row has room for {spec.row_capacity:,} beside the weights "
                          f"({spec.token_bytes_per_pe:,} bytes a token on each PE, for {spec.batch} sequence(s)); a "
                          "shorter prompt, fewer sequences (workload.batch), or " + more.replace("use ", "")])
    from .prefill import check_prefill, prefill_of

    pp = int(w.get("prefill_region", 0)) or p
    pre = prefill_of(spec, model, pp, int(w["decode_group"]) or default_group(pp, levels), spread(p, spec.context))
    check_prefill(pre, spec.sram_bytes, int(w.get("prefill_region", 0)))
    return replace(spec, prefill=pre)


def _fabric(m: dict) -> tuple | None:
    """(rows, cols) of the usable fabric of the machine's preset (docs/mesh.md, "Presets"); None for
    another."""
    from .keys import PRESETS

    preset = PRESETS.get(str(m.get("preset", "")))
    return (preset["rows"], preset["cols"]) if preset else None


def wafers_needed(sides, rows: int, cols: int) -> int:
    """Wafers of rows x cols PEs that square regions of these sides take, placed in shelves (docs/decode.md,
    "Placement on the wafer"): largest first, left to right along a shelf as tall as its first region, a
    new shelf above when a row is full, a new wafer when the shelves are; 0 when a region is larger than
    the wafer. A shelf placement can leave room unused: the wafers hold the regions, not always the fewest."""
    sides = sorted(sides, reverse=True)
    if not sides:
        return 0
    if sides[0] > min(rows, cols):
        return 0
    wafers, base, height, x = 1, 0, sides[0], 0
    for s in sides:
        if x + s > cols:  # the shelf is full: a new one above it
            base, height, x = base + height, s, 0
        if base + s > rows:  # the wafer is full: a new one
            wafers, base, height, x = wafers + 1, 0, s, 0
        x += s
    return wafers


def spread(p: int, tokens: int) -> np.ndarray:
    """`tokens` over p rows as evenly as can be, the last `tokens mod p` rows one more."""
    base, extra = divmod(tokens, p)
    rows = np.full(p, base, np.int64)
    if extra:
        rows[p - extra:] += 1
    return rows


def add_token(spec: DecodeSpec, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """The rows after one more token joins the cache, and the token-moves between neighbouring rows
    that kept them so (docs/decode.md, "The key-value cache")."""
    if spec.policy == "append":
        out = rows.copy()
        out[-1] += 1
        return out, 0
    out = spread(spec.p, int(rows.sum()) + 1)
    # across the boundary above row y pass what lies at y and below, the new token with it, less
    # what stays there
    below_before = np.cumsum(rows[::-1])[::-1]
    below_after = np.cumsum(out[::-1])[::-1]
    return out, int((below_before[1:] + 1 - below_after[1:]).sum())


def _step_cycles(spec: DecodeSpec, rows: np.ndarray) -> list:
    """The ten steps' local work in cycles on each row's PEs (docs/decode.md, "One layer")."""
    d, f, a = spec.dp, spec.fp, spec.heads
    macs = [np.full(spec.p, d), np.full(spec.p, d * spec.qp), d * rows, a * rows, a * rows, rows * d,
            np.full(spec.p, d * d), np.full(spec.p, d), np.full(spec.p, d * spec.g * f), np.full(spec.p, f * d)]
    return [(np.asarray(x, np.int64) * spec.batch * spec.rate_den + spec.rate_num - 1) // spec.rate_num for x in macs]


def token_busy(spec: DecodeSpec, rows: np.ndarray) -> np.ndarray:
    """int64[regions, rows]: cycles of local work (multiply-adds) each row's PEs of each region do in one
    token, every layer of the region."""
    cycles = sum(_step_cycles(spec, rows))
    return np.array(spec.region_layers, np.int64)[:, None] * cycles[None, :]


def layer_parts(spec: DecodeSpec, rows: np.ndarray) -> tuple[int, int]:
    """(local, set-up) cycles of a layer's time as docs/decode.md, "Where a token's time goes", attributes
    them: each step's longest local work, and the set-up of the ten collectives' K + 1 phases, 10 (K + 1) o."""
    return int(sum(int(c.max()) for c in _step_cycles(spec, rows))), 10 * (spec.levels + 1) * spec.phase


def token_cycles(spec: DecodeSpec, rows: np.ndarray) -> int:
    """A token's layers, region by region, and the passes between the regions (docs/decode.md, "A token",
    "A model over several regions")."""
    total = spec.pass_cycles * (spec.regions - 1)
    for layers in sorted(set(spec.region_layers)):
        count = spec.region_layers.count(layers)
        done = np.zeros(layers, np.int64)
        total += count * int(call(K.token, spec.p, spec.dp, spec.qp, spec.fp, spec.g, spec.heads, layers, rows,
                                  spec.group, spec.levels, spec.routed, spec.hop, spec.add, spec.phase, spec.rate_num,
                                  spec.rate_den, done, spec.batch))
    return total


class DecodeState:
    """A generation between kernel calls: tokens done, the cycle, the cache's rows, per-row busy cycles."""

    def __init__(self, spec: DecodeSpec):
        self.spec = spec
        self.tokens_done = 0
        self.cycle = 0
        self.rows = spread(spec.p, spec.context)
        self.busy = np.zeros((spec.regions, spec.p), np.int64)
        self.moved = 0
        self.layer_cycles = 0  # the tokens' layers, without the shifts between them
        self.last_layers = 0  # the last token's layers
        self.full = False  # the cache took no more: the generation ended early
        self.latencies: list = []

    def advance(self, n: int) -> tuple:
        """Decode up to n tokens: (their rows of the tokens/ table, TOKEN_COLUMNS in order; the cache's
        rows after each)."""
        spec = self.spec
        out, caches = [], []
        while len(out) < n and not self.finished:
            rows, moved = add_token(spec, self.rows)
            if rows.max() > spec.row_capacity:
                self.full = True
                break
            cycles = token_cycles(spec, rows)
            shift = spec.shift_cycles if moved else 0
            out.append((self.tokens_done, self.cycle, cycles + shift, cycles, shift, int(rows.sum()), int(rows.max()),
                        int(np.argmax(rows)), moved))
            caches.append(rows)
            self.busy += token_busy(spec, rows)
            self.cycle += cycles + shift
            self.layer_cycles += cycles
            self.last_layers = cycles
            self.rows, self.moved = rows, self.moved + moved
            self.tokens_done += 1
            self.latencies.append(cycles + shift)
        shape = (len(out), spec.p)
        return (np.array(out, np.int64).reshape(len(out), len(TOKEN_COLUMNS)),
                np.array(caches, np.int64).reshape(shape))

    @property
    def finished(self) -> bool:
        return self.full or self.tokens_done >= self.spec.output_tokens


#: The tokens/ table's columns: name -> (units, description).
TOKEN_COLUMNS = {
    "token": ("1", "decoded token, from 0"),
    "start_cycle": ("cycle", "cycle the token starts (the one before has finished, its cache shifted)"),
    "cycles": ("cycles", "the token's time: its layers and the cache's shift after it"),
    "layer_cycles": ("cycles", "its layers, one after the other, and the passes between regions (if several)"),
    "shift_cycles": ("cycles", "the cache's shift between rows after it (0: none)"),
    "context": ("tokens", "keys it attends to: the cache with its own"),
    "cache_max_row_tokens": ("tokens", "the fullest row's tokens"),
    "cache_max_row": ("1", "the fullest row (the lowest of equals)"),
    "moved_tokens": ("tokens", "tokens the shift passed to a neighbouring row"),
}


class DecodeResultWriter(TokenTables):
    """A decode run's file: the tokens/ table, the cache's rows per token, per-PE busy cycles."""

    def __init__(self, final_path, scenario, spec: DecodeSpec, *, threads: int, compression_level: int):
        super().__init__(final_path, scenario, "mesh", threads, 0, compression_level)
        f, p = self.f, spec.p
        self.row = self._scale(f, "row", np.arange(p, dtype=np.int32), "1", "row of PEs (the cache's sequence axis)")
        self.col = self._scale(f, "col", np.arange(p, dtype=np.int32), "1", "column of PEs")
        self._tokens(TOKEN_COLUMNS, "one row per decoded token, in order (docs/decode.md, \"Result file\")",
                     "decoded token")
        occ = f.create_group("occupancy")
        occ.attrs["description"] = "the key-value cache's tokens on each row of PEs after each decoded token"
        self.cache = occ.create_dataset("cache_tokens", shape=(0, p), maxshape=(None, p), dtype=np.int32,
                                        chunks=(max(1, 65536 // p), p), **self.comp)
        describe(self.cache, "tokens", "tokens of the cache each row's PEs hold, after each token")
        self.cache.dims[0].attach_scale(self.token)
        self.cache.dims[1].attach_scale(self.row)
        u = f.create_group("units")
        u.attrs["description"] = "per-PE totals over the tokens decoded"
        r = spec.regions
        rows = self.row if r == 1 else self._scale(f, "region_row", np.arange(r * p, dtype=np.int32), "1",
                                                   "row of PEs, region by region (region r: rows r P to r P + P - 1)")
        self.busy = u.create_dataset("busy_cycles", data=np.zeros((r * p, p), np.int64), chunks=True, **self.comp)
        describe(self.busy, "cycles", "cycles of local work (multiply-adds) each PE did")
        self.busy.dims[0].attach_scale(rows)
        self.busy.dims[1].attach_scale(self.col)
        f.create_group("summary").attrs["description"] = "the run's figures (docs/decode.md, \"Result file\")"

    def write_busy(self, busy_rows) -> None:
        """busy_rows: int64[regions, rows], every PE of a row of a region alike."""
        self.busy[...] = np.repeat(np.asarray(busy_rows, np.int64).reshape(-1, 1), self.busy.shape[1], axis=1)


def summarise(spec: DecodeSpec, state: DecodeState, wall: float, kernel_seconds: float, threads: int,
              start_cycle: int = 0) -> dict:
    """A decode run's figures: the stable names (docs/design.md, "Result files") and its own (docs/decode.md)."""
    nan = float("nan")
    p, cycles, done = spec.p, state.cycle, state.tokens_done
    busy = np.repeat(state.busy.reshape(-1, 1), p, axis=1)  # every region's rows of PEs
    lat = np.array(state.latencies, np.int64)
    la = metrics.sample_latency_stats(lat)
    ms = 1e3 / (spec.clock_ghz * 1e9)
    cache = metrics.load_balance(state.rows)
    return {
        "cycles": cycles,
        "n_units": spec.regions * p * p,
        **metrics.balance_figures(busy, cycles),
        **metrics.latency_figures(la),
        "injected": done,
        "refused": spec.output_tokens - done if state.full else 0,
        "completed": done,
        "in_system_at_end": 0,
        "migrated": state.moved,
        "decode_tokens": done,
        "decode_context_start": spec.context,
        "decode_context_end": int(state.rows.sum()),
        "decode_longest_context": spec.longest_context(),
        "decode_cache_full": bool(state.full),
        "kv_policy": spec.policy,
        "region": p,
        "decode_tree_levels": spec.levels,
        "decode_group": spec.group,
        "decode_routes": tree_routes(spec.levels),
        "relayed_levels": spec.levels - spec.routed,
        "route_budget": spec.route_budget,
        "time_per_token_ms_mean": float(lat.mean()) * ms if done else nan,
        "time_per_token_ms_p50": la["p50"] * ms if done else nan,
        "time_per_token_ms_p99": la["p99"] * ms if done else nan,
        "tokens_per_second": done / (cycles * ms / 1e3) if cycles else nan,
        "tokens_per_second_total": spec.batch * done / (cycles * ms / 1e3) if cycles else nan,
        "sequences": spec.batch,
        "cycles_per_layer": (state.layer_cycles - done * (spec.regions - 1) * spec.pass_cycles) / (done * spec.n_layers)
        if done else nan,
        **_layer_shares(spec, state),
        "cache_li": cache["li"],
        "cache_max_row_tokens": int(state.rows.max()),
        "cache_row_capacity": spec.row_capacity,
        "weight_bytes_per_pe": spec.weight_bytes_per_pe,
        **_prefill_figures(spec),
        **_placement(spec),
        "clock_ghz": spec.clock_ghz,
        "simulated_seconds": cycles * ms / 1e3,
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds,
        "pe_cycles_per_second": spec.regions * p * p * (cycles - start_cycle) / kernel_seconds if kernel_seconds
        else nan,
        "threads": threads,
    }


def _layer_shares(spec: DecodeSpec, state) -> dict:
    """The last token's layers split as docs/decode.md, "Where a token's time goes", says: local work,
    the collectives' set-up, what relays add over routes, and the rest, their hops and streaming
    (shares of its layer cycles)."""
    nan = float("nan")
    if not state.tokens_done:
        return dict(layer_local_fraction=nan, layer_setup_fraction=nan, layer_relay_fraction=nan,
                    layer_network_fraction=nan)
    per_layer = (state.last_layers - spec.pass_cycles * (spec.regions - 1)) / spec.n_layers
    local, setup = layer_parts(spec, state.rows)
    relay = 0.0
    if spec.routed < spec.levels:  # the same token with every level routed
        relay = (state.last_layers - token_cycles(replace(spec, routed=spec.levels), state.rows)) / spec.n_layers
    return dict(layer_local_fraction=local / per_layer, layer_setup_fraction=setup / per_layer,
                layer_relay_fraction=relay / per_layer,
                layer_network_fraction=(per_layer - local - setup - relay) / per_layer)


def _placement(spec: DecodeSpec) -> dict:
    """The regions on the preset's wafer (docs/decode.md, "Placement on the wafer"): the decode regions,
    and the prefill's when it has its own."""
    sides = [spec.p] * spec.regions
    if spec.prefill.pp != spec.p and spec.context:
        sides += [spec.prefill.pp] * spec.regions
    if spec.wafer is None:
        return dict(wafers=-1)
    return dict(wafers=wafers_needed(sides, *spec.wafer), wafer_rows=spec.wafer[0], wafer_cols=spec.wafer[1])


def _prefill_figures(spec: DecodeSpec) -> dict:
    """The prefill's summary figures (docs/decode.md, "Result file")."""
    pre = spec.prefill
    return {
        "time_to_first_token_ms": pre.ttft / (spec.clock_ghz * 1e6),
        "prefill_region": pre.pp,
        "prefill_cycles": pre.cycles,
        "prefill_cycles_per_layer": pre.layer_cycles,
        "decode_regions": spec.regions,
        "region_pass_cycles": spec.pass_cycles,
        "reshuffle_cycles": pre.reshuffle,
        "prefill_bytes_per_pe": pre.bytes_per_pe,
    }


class DecodeRun(TokenRun):
    """A decode run between kernel calls: some tokens a call, their rows written as they come."""

    def __init__(self, scenario, spec: DecodeSpec, per_call: int | None = None):
        super().__init__(DecodeState(spec), spec.output_tokens, per_call or 4)
        self.scenario = scenario
        self.spec = spec

    def open_writer(self, path, threads: int) -> DecodeResultWriter:
        return DecodeResultWriter(path, self.scenario, self.spec, threads=threads,
                                  compression_level=self.scenario.get("output", "compression_level"))

    def prepare_flush(self, writer) -> None:
        writer.write_busy(self.state.busy)

    def summarise(self, timing) -> dict:
        return summarise(self.spec, self.state, timing.wall, timing.kernel_total, timing.threads, timing.start_cycle)

    def write_final(self, writer) -> None:
        writer.write_busy(self.state.busy)

    def checkpoint(self) -> tuple:
        s = self.state
        return (dict(tokens_done=s.tokens_done, cycle=s.cycle, moved=s.moved, full=s.full,
                     layer_cycles=s.layer_cycles),
                dict(rows=s.rows, busy=s.busy))

    def restore(self, values: dict, arrays: dict, writer) -> None:
        s = self.state
        for name, shape in (("rows", (self.spec.p,)), ("busy", (self.spec.regions, self.spec.p))):
            a = arrays.get(name)
            if a is None or a.shape != shape:
                raise InputError(f"checkpoint array {name}: does not fit this run's region, so the run cannot resume; "
                                 "run the scenario again")
            setattr(s, name, a.astype(np.int64, copy=True))
        s.tokens_done, s.cycle = int(values["tokens_done"]), int(values["cycle"])
        s.moved, s.full, s.layer_cycles = int(values["moved"]), bool(values["full"]), int(values["layer_cycles"])
        if writer.n != s.tokens_done:
            raise InputError(f"{writer.path}: holds {writer.n} tokens and its checkpoint {s.tokens_done}; the run "
                             "cannot resume")
        s.latencies = list(writer.cols["cycles"][:writer.n].astype(np.int64)) if writer.n else []
        s.last_layers = int(writer.cols["layer_cycles"][writer.n - 1]) if writer.n else 0


def _regions(s: dict) -> str:
    from ..report import fmt as _f

    side = f"{_f(s['region'])} x {_f(s['region'])}"
    n = int(s.get("decode_regions", 1))
    if n == 1:
        return f"a {side} region"
    return (f"{n} regions of {side}, the layers split over them ({_f(s['region_pass_cycles'])} cycles from one to the "
            "next)")


def _placement_line(s: dict) -> list:
    """Where the regions lie, when the file says: how many of the preset's wafers they take."""
    if int(s.get("wafers", -1)) < 0:
        return []
    from ..report import fmt as _f

    n, side = int(s["wafers"]), f"{_f(s['wafer_rows'])} x {_f(s['wafer_cols'])}"
    if n == 0:
        return [f"placement     a region is larger than the wafer's {side} PEs"]
    more = " (the passes between wafers are timed as on one)" if n > 1 else ""
    return [f"placement     the regions take {n} wafer(s) of {side} PEs, placed in shelves{more}"]


def _tree_line(s: dict) -> list:
    """The collectives' tree, when the file has it: its levels, groups and routes, and what is relayed."""
    if "decode_tree_levels" not in s:
        return []
    from ..report import fmt as _f

    k, relayed = int(s["decode_tree_levels"]), int(s["relayed_levels"])
    said = (f"; the top {relayed} level(s) relayed through the PEs between their members (the route budget holds "
            f"{_f(s.get('route_budget', 0))})" if relayed else "")
    return [f"collectives   a {k}-level tree, groups of {_f(s['decode_group'])}, {_f(s['decode_routes'])} routes a "
            f"router{said}"]


def summary_lines(s: dict) -> list:
    """The one-screen summary of a decode run."""
    from ..report import fmt as _f

    full = " (the cache filled: the generation stopped early)" if s.get("decode_cache_full") else ""
    first = []
    if "time_to_first_token_ms" in s:
        n = int(s.get("decode_regions", 1))
        where = (f"a {_f(s['prefill_region'])} x {_f(s['prefill_region'])} region" if n == 1 else
                 f"{n} regions of {_f(s['prefill_region'])} x {_f(s['prefill_region'])}")
        first = [f"first token   {_f(s['time_to_first_token_ms'])} ms: the prompt's prefill on {where}, "
                 f"{_f(s['prefill_cycles_per_layer'])} cycles a layer, then {_f(s['reshuffle_cycles'])} cycles of "
                 "reshuffle onto the decode region"]
    return [
        f"decode        {_f(s['decode_tokens'])} tokens{full} on {_regions(s)}, "
        f"context {_f(s['decode_context_start'])} -> {_f(s['decode_context_end'])} tokens",
        *first,
        f"time/token    mean {_f(s['time_per_token_ms_mean'])} ms, p50 {_f(s['time_per_token_ms_p50'])}, p99 "
        f"{_f(s['time_per_token_ms_p99'])}; {_f(s['tokens_per_second'])} tokens/s per request"
        + (f", {_f(s['tokens_per_second_total'])} in all ({_f(s['sequences'])} sequences)" if s.get("sequences", 1) > 1
           else "") + "; "
        f"{_f(s['cycles_per_layer'])} cycles a layer",
        f"a layer       local work {_f(s['layer_local_fraction'])}, the collectives' set-up "
        f"{_f(s['layer_setup_fraction'])}, "
        + (f"relays {_f(s['layer_relay_fraction'])} (over routes), " if s.get("relayed_levels") else "")
        + f"their hops and streaming {_f(s['layer_network_fraction'])} (the last token's)",
        *_tree_line(s),
        *_placement_line(s),
        f"cache         {s['kv_policy']}: LI {_f(s['cache_li'])} over the rows (mean/max tokens); the fullest row "
        f"holds {_f(s['cache_max_row_tokens'])} of {_f(s['cache_row_capacity'])}; longest context "
        f"{_f(s['decode_longest_context'])} tokens; {_f(s['migrated'])} tokens shifted between rows",
        f"LI            {_f(s['li'])} over {_f(s['n_units'])} PEs (local work, mean/max busy; Jain "
        f"{_f(s['jain_index'])}); busy {_f(s['utilization'])} of PE-cycles",
        f"memory        weights {_f(s['weight_bytes_per_pe'])} bytes a PE",
        f"speed         {_f(s['pe_cycles_per_second'], 3)} PE-cycles/s; {_f(s['wall_seconds'], 3)} s wall",
    ]

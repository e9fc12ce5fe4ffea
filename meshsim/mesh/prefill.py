"""The prefill before decode on the wafer and the time to first token (docs/decode.md, "Prefill and the
time to first token"): the prompt through every layer once on a Pp x Pp region, each product a
MeshGEMM as WaferLLM's prefill kernel computes it, then the reshuffle of the cache onto the decode
region's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels import decode as K

from ..compiled import call
from ..errors import InputError


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Prefill:
    """The prefill's figures (docs/decode.md's names)."""

    pp: int
    layer_steps: tuple  # the ten steps' cycles of one layer
    n_layers: int
    reshuffle: int
    bytes_per_pe: int
    regions: int = 1
    pass_cycles: int = 0  # the prompt's activations from one prefill region to the next
    batch: int = 1  # B prompts, one after another

    @property
    def layer_cycles(self) -> int:
        return sum(self.layer_steps)

    @property
    def cycles(self) -> int:
        return self.batch * (self.n_layers * self.layer_cycles + (self.regions - 1) * self.pass_cycles)

    @property
    def ttft(self) -> int:
        return self.cycles + self.reshuffle


def prefill_of(spec, model, pp: int, group: int, decode_rows: np.ndarray) -> Prefill:
    """The prefill of a decode spec (meshsim.mesh.decode.DecodeSpec) and its model on a Pp x Pp region, with
    the decode region's rows of the prompt (decode_rows: tokens a row)."""
    s, h, f, g, a = spec.context, model.hidden_size, model.ffn_size, spec.g, model.n_heads
    if s == 0:  # no prompt, no prefill
        return Prefill(pp=pp, layer_steps=(0,) * 10, n_layers=spec.n_layers, reshuffle=0, bytes_per_pe=0,
                       regions=spec.regions, batch=spec.batch)
    d, kv = model.attention_size, model.kv_size
    q = d + 2 * kv
    st = _cdiv(s, pp)
    o, hop = spec.phase, spec.hop

    def local(macs: int) -> int:
        return (macs * spec.rate_den + spec.rate_num - 1) // spec.rate_num

    def gemm(m: int, k: int, n: int) -> int:
        mt, kt, nt = _cdiv(m, pp), _cdiv(k, pp), _cdiv(n, pp)
        align = (pp // 2) * (o + mt * kt + hop)
        return align + pp * (o + max(local(mt * kt * nt), max(mt * kt, kt * nt) + 2 * hop))

    def reduce(m: int) -> int:
        out = np.zeros(pp, np.int64)
        call(K.line_collective, np.zeros(pp, np.int64), m, group, spec.levels, spec.routed, hop, spec.add, o, out)
        return int(out.max())

    dp = _cdiv(h, pp)
    norm = local(st * dp) + reduce(st)
    soft = local(a * st * st) + reduce(a * st)
    steps = (norm, gemm(s, h, q), gemm(s, d, s), soft, soft, gemm(s, s, d), gemm(s, d, h), norm,
             gemm(s, h, g * f), gemm(s, f, h))
    reshuffle = 0
    if pp != spec.p:
        reshuffle = (o + 2 * spec.most_layers * spec.batch * int(decode_rows.max()) * spec.kp
                     + hop * (pp + spec.p - 2))
    c = _cdiv
    products = ((s, h, q), (s, d, s), (s, s, d), (s, d, h), (s, h, g * f), (s, f, h))
    work = max(2 * (c(m, pp) * c(k, pp) + c(k, pp) * c(n, pp)) + c(m, pp) * c(n, pp) for m, k, n in products)
    weights = spec.most_layers * (c(h, pp) * c(q, pp) + c(d, pp) * c(h, pp) + c(h, pp) * c(g * f, pp)
                               + c(f, pp) * c(h, pp) + 2 * c(h, pp))
    elements = weights + 2 * spec.most_layers * spec.batch * st * c(kv, pp) + a * st * st + work
    passing = o + st * dp + hop * pp if spec.regions > 1 else 0  # the prompt's activations to the next region
    return Prefill(pp=pp, layer_steps=steps, n_layers=spec.n_layers, reshuffle=reshuffle,
                   bytes_per_pe=elements * spec.element_bytes, regions=spec.regions, pass_cycles=passing,
                   batch=spec.batch)


def check_prefill(pre: Prefill, sram_bytes: int, given: int) -> None:
    """InputError when a prefill PE's memory passes its SRAM (`given`: workload.prefill_region as set)."""
    if pre.bytes_per_pe > sram_bytes:
        said = f"{given}" if given else f"0 (the decode region's {pre.pp})"
        raise InputError([f"workload.prefill_region = {said}: the prefill needs {pre.bytes_per_pe:,} bytes on each "
                          f"PE of a {pre.pp} x {pre.pp} region (the weights' blocks, its tokens' cache, the scores and "
                          f"a product's blocks), and a PE has {sram_bytes:,} (machine.sram_kib); a larger prefill "
                          "region, more regions (workload.decode_regions), a shorter prompt (workload.context) or "
                          "fewer sequences (workload.batch)"])


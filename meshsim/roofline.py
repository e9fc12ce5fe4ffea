"""Rooflines of the platforms and of a run's machine (docs/design.md, "Metrics": arithmetic intensity =
FLOPs / bytes moved; the ridge point is peak FLOP/s / bandwidth, computed from the preset, never
typed in).

Platform presets: each machine names its published chips (`Machine.platform_presets`), with their
sources beside the figures in its package's keys module:

- WSE-2 (meshsim/mesh/keys.py): 7.5 PFLOP/s (16-bit) over about 850,000 PEs and 20 PB/s of
  on-chip memory bandwidth; its weights live in the PEs' SRAM, so SRAM bandwidth is the roof.
- SN10, SN30 (meshsim/rdu/keys.py, the rdu presets): peak = PCUs x lanes x stages x 2 x clock,
  bandwidth = the DDR bandwidth sections stream from.
- GC200 (meshsim/ipu/keys.py): 250 TFLOP/s (16-bit) and 47.5 TB/s of in-processor memory
  bandwidth; an ipu scenario's platform is its tiles x MACs x 2 x clock with its exchange, tiles x
  exchange_bytes_per_cycle x clock, as the roof (the model moves a superstep's data over the
  exchange; docs/ipu.md, "Roofline").

For a result file or scenario, the platform is its own machine: a mesh of rows x cols PEs at
`pe_flops_per_cycle` and `clock_ghz`, with its PEs' SRAM ports (`sram_read_bytes_per_cycle` +
`sram_write_bytes_per_cycle`, 12 bytes a cycle on the WSE-2: 11 PB/s over 850,000 PEs, against the
20 PB/s Cerebras quotes for its memory); an rdu chip from its
keys. The kernels are the transformer's operators of one layer (`meshsim.transformer`), each with
its FLOPs and bytes moved (weights, inputs and outputs), unless the machine places its own
(`Machine.roofline_kernels`): the rdu's compiled sections with their DDR bytes (docs/rdu.md,
"Roofline"), the ipu's compiled supersteps with their exchange bytes (docs/ipu.md, "Roofline").
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace

from . import machine as machines
from .transformer import Model, model_from_workload, operators


@dataclass(frozen=True)
class Platform:
    """A roofline: peak FLOP/s and the bandwidth (bytes/s) of the memory the roof is drawn for."""

    name: str
    peak_flops: float
    bandwidth: float
    memory: str
    #: bytes/s the weights stream in at when they are not resident (the mesh's weight streaming):
    #: a second roof, for a kernel's weight bytes alone; None when the weights stay in memory
    weight_bandwidth: float | None = None

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the roof turns from memory- to compute-bound: peak / bandwidth."""
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity: float) -> float:
        """FLOP/s the roof allows at an arithmetic intensity: min(peak, intensity x bandwidth)."""
        return min(self.peak_flops, intensity * self.bandwidth)


def rdu_platform(name: str, keys: dict, rate=1) -> Platform:
    """An rdu chip's roofline from its keys: peak = PCUs x lanes x stages x 2 x clock x rate (the
    compute rate at the precision, meshsim.transformer.compute_rate); its HBM's bandwidth where it has
    HBM (the SN40L; a generation streams from it, meshsim.rdu.machine.platform), else its DDR's."""
    peak = keys["pcus"] * keys["pcu_lanes"] * keys["pcu_stages"] * 2 * keys["clock_ghz"] * 1e9 * float(rate)
    if keys.get("hbm_gib"):
        return Platform(name, peak, keys["hbm_bandwidth_gbps"] * 1e9, "HBM")
    return Platform(name, peak, keys["ddr_bandwidth_gbps"] * 1e9, "DDR")


def presets() -> dict[str, Platform]:
    """The platform presets, by key: every machine's published chips (Machine.platform_presets),
    in registry order."""
    out = {}
    for m in machines.all_machines():
        out.update(m.platform_presets())
    return out


def platform_of(values: dict) -> Platform | None:
    """The roofline of a resolved scenario's machine (`Scenario.values`, or a result file's
    scenario_resolved read back), as the machine draws it (meshsim.machine.Machine.platform)."""
    return machines.get(values["machine"]["type"]).platform(values)


def model_of(values: dict) -> tuple[Model, bool] | None:
    """(the transformer, training) of a scenario whose workload is one, else None; a decode workload's
    is its first step after the prompt: one token a sequence over the context."""
    w = values["workload"]
    if w["type"] == "decode":
        return replace(model_from_workload(w), seq_len=1), False
    if w["type"] not in ("layer_pipeline", "transformer"):
        return None
    return model_from_workload(w), w["training"]


def kernels(model: Model, training: bool, platform: Platform) -> list[dict]:
    """One row per operator of one layer (layer 0; every layer is the same): name, kind, FLOPs,
    bytes moved, arithmetic intensity, the FLOP/s the roof allows and the verdict: "compute",
    "memory", or "weights" where the platform streams its weights in and their stream is the
    lowest roof (FLOPs / weight bytes x the stream's bandwidth)."""
    rows = []
    for op in operators(model, training):
        if op.layer != 0:
            continue
        ai = op.arithmetic_intensity
        attainable, bound = platform.attainable(ai), "memory" if ai < platform.ridge else "compute"
        if platform.weight_bandwidth and op.weight_bytes:
            # streamed weights: their bytes alone against the stream's bandwidth
            streamed = op.flops / op.weight_bytes * platform.weight_bandwidth
            if streamed < attainable:
                attainable, bound = streamed, "weights"
        rows.append(dict(name=op.name.split(".", 1)[1], kind=op.kind, flops=op.flops, bytes=op.bytes_moved,
                         intensity=ai, attainable_flops=attainable, bound=bound))
    return rows


def kernels_of(values: dict, platform: Platform) -> list[dict] | None:
    """The kernels of a resolved scenario on its own platform, as its machine places them on a
    roofline (meshsim.machine.Machine.roofline_kernels: the rdu's compiled sections against their
    DDR and on-chip bytes), else `kernels` of its transformer; None without a transformer."""
    found = model_of(values)
    if found is None:
        return None
    own = machines.get(values["machine"]["type"]).roofline_kernels(values, platform)
    return own if own is not None else kernels(*found, platform)


def kernels_title(rows: list[dict]) -> str:
    """What the rows of `kernels_of` are, for a table's or a figure's title."""
    if rows and rows[0]["kind"] == "section":
        return "sections holding layer 0, as compiled"
    if rows and rows[0]["kind"] == "kernel call":
        return "kernel calls of the first decode step"
    if rows and "stage" in rows[0]:
        return "supersteps of layer 0 for one micro-batch, as compiled"
    return "kernels of one layer"


def values_of_file(path) -> dict:
    """The resolved scenario stored in a result file, as `Scenario.values`; the keys a file written
    by an older meshsim lacks take their defaults (what such a file's run used), by resolving it
    again when it still validates."""
    from .errors import InputError
    from .output import open_result_file
    from .scenario import scenario_from_dict

    with open_result_file(path) as f:
        text = f.attrs["scenario_resolved"]
    values = tomllib.loads(text.decode() if isinstance(text, bytes) else text)
    try:
        return scenario_from_dict(values).values
    except InputError:
        return values


def format_table(values: dict | None = None) -> str:
    """The presets' roofs and, for a scenario with a transformer, its kernels on its own machine."""
    lines = [f"{'platform':<28}{'peak TFLOP/s':>14}{'bandwidth TB/s':>16}{'ridge FLOP/B':>14}  {'memory':<10}roof"]
    plats = [(p, "datasheet") for p in presets().values()]
    own = platform_of(values) if values is not None else None
    if own is not None:
        plats.append((own, "this scenario's machine"))
    for p, roof in plats:
        lines.append(f"{p.name:<28}{p.peak_flops / 1e12:>14,.1f}{p.bandwidth / 1e12:>16,.3f}{p.ridge:>14,.3g}  "
                     f"{p.memory:<10}{roof}")
    if own is not None:
        lines += ["datasheet: a chip's published peak and memory bandwidth; this scenario's machine: the roof the",
                  "kernels below are placed on, from the scenario's keys and the memory they wait on (one chip, two "
                  "ridges)"]
    rows = kernels_of(values, own) if own is not None else None
    if rows is not None:
        plat = own
        stream = ""
        if plat.weight_bandwidth:
            stream = (f"; weights streamed in at {plat.weight_bandwidth / 1e9:g} GB/s, ridge "
                      f"{plat.peak_flops / plat.weight_bandwidth:.3g} FLOP per weight byte")
        what = kernels_title(rows)
        lines += ["", f"{what} on {plat.name} (ridge {plat.ridge:.3g} FLOP/B{stream})",
                  f"{'kernel':<40}{'kind':<12}{'GFLOP':>10}{'MB':>10}{'FLOP/B':>10}{'roof TFLOP/s':>14}  bound"]
        for k in rows:
            ai = f"{k['intensity']:>10,.3g}" if math.isfinite(k["intensity"]) else f"{'none':>10}"
            lines.append(f"{k['name'][:39]:<40}{k['kind']:<12}{k['flops'] / 1e9:>10,.2f}{k['bytes'] / 1e6:>10,.2f}"
                         f"{ai}{k['attainable_flops'] / 1e12:>14,.1f}  {k['bound']}")
        if any(not math.isfinite(k["intensity"]) for k in rows):
            lines.append(f"FLOP/B none: the kernel moves no byte over {plat.memory}; only its own roof bounds it")
    return "\n".join(lines)

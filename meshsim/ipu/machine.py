"""The ipu as a machine (meshsim.machine): Graphcore-style bulk-synchronous tiles (docs/ipu.md).

Its parts are imported when first used: reading a scenario asks for the machine's checks alone.
"""

from __future__ import annotations

from ..machine import Machine, register
from . import checks, keys


def _decoding(scenario) -> bool:
    return scenario.get("workload", "type") == "decode"


class IpuMachine(Machine):
    name = "ipu"
    unit = "step"
    unit_label = "tiles"
    busy_dataset = "units/tile_busy_cycles"
    series_group = "supersteps"
    target_li = 0.80
    workloads = ("transformer", "decode")
    params = keys.PARAMS
    presets = keys.PRESETS
    default_preset = keys.DEFAULT_PRESET
    resumable = True
    compile_seconds = 15  # measured: a fresh Numba cache, two cores (docs/design.md, "Performance")
    aliases = keys.ALIASES
    levers = checks.LEVERS

    def compile_scenario(self, scenario):
        if _decoding(scenario):
            from .decode import decode_program

            return decode_program(scenario)
        from .compiler import compile_scenario

        return compile_scenario(scenario)  # with the memory check: what a run would refuse

    def start(self, scenario, inputs, per_call: int | None = None):
        if _decoding(scenario):
            from .decode import IpuDecodeRun

            return IpuDecodeRun(scenario, inputs, per_call)
        from .run import IpuRun

        return IpuRun(inputs, per_call)

    def open_writer(self, path, scenario, run, threads: int):
        return run.open_writer(path, scenario, threads)

    def trace_events(self, f, values: dict, timeline) -> None:
        from .perfetto import trace_events

        if values.get("workload", {}).get("type") == "decode":
            from ..export import generation_events

            return generation_events(f, timeline, "IPU")
        trace_events(f, values, timeline)

    def check_scenario(self, ok, get, add, shown, path=None) -> None:
        checks.check_scenario(ok, get, add, shown)

    def describe(self, label: str, scenario, inputs) -> str:
        m = scenario.values["machine"]
        if _decoding(scenario):
            w, prog = scenario.values["workload"], inputs.prog
            return (f"{label}: valid (ipu {m['preset']}, decode of {w['output_tokens']:,} tokens after "
                    f"{w['context']:,} on {prog.stages} IPU(s), {len(prog.templates)} supersteps a step; fullest "
                    f"tile {int(prog.memory.max()):,} of {m['tile_sram_kib'] * 1024:,} bytes)")
        tp = inputs.spec.tensor_parallel
        return (f"{label}: valid (ipu {m['preset']}, {inputs.stages} stage(s) x "
                + (f"{tp} tensor-parallel x " if tp > 1 else "") + f"{inputs.spec.replicas} replica(s), "
                f"{len(inputs.templates)} superstep templates; fullest tile {int(inputs.memory.max()):,} of "
                f"{m['tile_sram_kib'] * 1024:,} bytes)")

    def roofline_kernels(self, values: dict, platform) -> list:
        from .compiler import roofline_rows

        return roofline_rows(values, platform)

    def bench(self, quick: bool = False, cycles: int = 300, log=print) -> dict:
        from .bench import measure

        return measure(quick=quick, cycles=cycles, log=log)

    def platform_presets(self) -> dict:
        from ..roofline import Platform

        return {"gc200": Platform("GC200", keys.GC200_PEAK_FLOPS, keys.GC200_SRAM_BYTES_PER_SECOND, "SRAM")}

    def platform(self, values: dict):
        from ..roofline import Platform
        from ..transformer import compute_rate

        # the peak at the precision, and the exchange: every tile sends (and receives) its
        # exchange_bytes_per_cycle, the bandwidth a superstep's data moves at (docs/ipu.md, "Roofline")
        m, precision = values["machine"], values.get("workload", {}).get("precision", "bf16")
        hz = m["clock_ghz"] * 1e9
        rate = float(compute_rate(precision, m["fp32_rate"]))
        return Platform(f"ipu {m['preset']} ({m['tiles']} tiles, {precision})",
                        m["tiles"] * m["macs_per_cycle"] * 2 * hz * rate,
                        m["tiles"] * m["exchange_bytes_per_cycle"] * hz, "exchange")

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list:
        from . import report

        if "decode_tokens" in summary:
            from .decode import summary_lines

            return summary_lines(summary)
        return report.summary_lines(summary, regions)

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict | None:
        from . import analysis

        if values.get("workload", {}).get("type") == "decode":
            return None  # the load balance of units/tile_busy_cycles (meshsim.analysis.busy_only)
        return analysis.analyse(f, values, cycles, path)

    def judged(self, analysis: dict) -> dict:
        # what a user can change is the split of layers over the stages (workload.layers_per_stage):
        # the stages' balance is judged; the tiles' (li) is named beside it
        if "stage_li" in analysis["whole"]:
            return dict(figure="stage_li", what="LI of the pipeline stages' time per micro-batch (the split of "
                        "layers over IPUs)")
        return super().judged(analysis)

    def findings(self, analysis_: dict, add) -> None:
        from . import analysis

        analysis.findings(analysis_, add)


MACHINE = register(IpuMachine())

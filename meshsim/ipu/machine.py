"""The ipu as a machine (meshsim.machine): Graphcore-style bulk-synchronous tiles (docs/ipu.md)."""

from __future__ import annotations

from ..machine import Machine, register
from ..roofline import GC200_SRAM_BYTES_PER_SECOND, Platform
from . import analysis, checks, report
from .compiler import IpuProgram, compile_scenario
from .run import IpuRun


class IpuMachine(Machine):
    name = "ipu"
    unit = "step"
    unit_label = "tiles"
    busy_dataset = "units/tile_busy_cycles"
    target_li = 0.80

    def compile_scenario(self, scenario) -> IpuProgram:
        return compile_scenario(scenario)  # with the memory check: what a run would refuse

    def start(self, scenario, inputs: IpuProgram, per_call: int | None = None) -> IpuRun:
        return IpuRun(inputs, per_call)

    def open_writer(self, path, scenario, run: IpuRun, threads: int):
        return run.open_writer(path, scenario, threads)

    def check_scenario(self, ok, get, add, shown) -> None:
        checks.check_scenario(ok, get, add, shown)

    def describe(self, label: str, scenario, inputs: IpuProgram) -> str:
        m = scenario.values["machine"]
        return (f"{label}: valid (ipu {m['preset']}, {inputs.stages} stage(s) x {inputs.spec.replicas} replica(s), "
                f"{len(inputs.templates)} superstep templates; fullest tile {int(inputs.memory.max()):,} of "
                f"{m['tile_sram_kib'] * 1024:,} bytes)")

    def platform(self, values: dict):
        # the GC200's SRAM bandwidth per tile-cycle, on this scenario's tiles and clock
        m = values["machine"]
        per_tile_cycle = GC200_SRAM_BYTES_PER_SECOND / (1472 * 1.33e9)
        hz = m["clock_ghz"] * 1e9
        return Platform(f"ipu {m['preset']} ({m['tiles']} tiles)", m["tiles"] * m["macs_per_cycle"] * 2 * hz,
                        m["tiles"] * per_tile_cycle * hz, "SRAM")

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list:
        return report.summary_lines(summary, regions)

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict:
        return analysis.analyse(f, values, cycles, path)

    def findings(self, analysis_: dict, add) -> None:
        analysis.findings(analysis_, add)


MACHINE = register(IpuMachine())

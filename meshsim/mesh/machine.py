"""The mesh as a machine (meshsim.machine): a WSE-2-style grid of PEs (docs/mesh.md)."""

from __future__ import annotations

from ..machine import Machine, register
from ..roofline import WSE2_PES, WSE2_SRAM_BYTES_PER_SECOND, Platform
from . import analysis, checks, report
from .run import MeshRun
from .sim import MeshInputs, compile_scenario, default_threads


class MeshMachine(Machine):
    name = "mesh"
    unit = "cycle"
    unit_label = "PEs"
    busy_dataset = "units/busy_cycles"
    target_li = 0.98

    def compile_scenario(self, scenario) -> MeshInputs:
        return compile_scenario(scenario)

    def default_threads(self, inputs: MeshInputs) -> int:
        return default_threads(inputs.rows * inputs.cols)

    def start(self, scenario, inputs: MeshInputs, per_call: int | None = None) -> MeshRun:
        return MeshRun(scenario, inputs, per_call)

    def open_writer(self, path, scenario, run: MeshRun, threads: int):
        return run.open_writer(path, threads)

    def check_scenario(self, ok, get, add, shown) -> None:
        checks.check_scenario(ok, get, add, shown)

    def describe(self, label: str, scenario, inputs) -> str:
        m = scenario.values["machine"]
        return (f"{label}: valid ({self.name} {m['rows']} x {m['cols']}, {scenario.get('workload', 'type')} workload, "
                f"migration {scenario.get('migration', 'policy')}, {scenario.get('run', 'cycles'):,} cycles)")

    def platform(self, values: dict):
        # the PEs at pe_flops_per_cycle and clock_ghz, with the WSE-2's SRAM bandwidth per PE
        m = values["machine"]
        n = m["rows"] * m["cols"]
        return Platform(f"mesh {m['rows']} x {m['cols']}", n * m["pe_flops_per_cycle"] * m["clock_ghz"] * 1e9,
                        n * WSE2_SRAM_BYTES_PER_SECOND / WSE2_PES, "SRAM")

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list:
        return report.summary_lines(summary, regions)

    def read_regions(self, f, path):
        return report.read_regions(f, path)

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict:
        return analysis.analyse(f, values, cycles, window, path)


MACHINE = register(MeshMachine())

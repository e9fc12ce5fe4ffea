"""The mesh as a machine (meshsim.machine): a WSE-2-style grid of PEs (docs/mesh.md)."""

from __future__ import annotations

from ..machine import Machine, register
from . import analysis, report
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

    def describe(self, label: str, scenario, inputs) -> str:
        m = scenario.values["machine"]
        return (f"{label}: valid ({self.name} {m['rows']} x {m['cols']}, {scenario.get('workload', 'type')} workload, "
                f"migration {scenario.get('migration', 'policy')}, {scenario.get('run', 'cycles'):,} cycles)")

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list:
        return report.summary_lines(summary, regions)

    def read_regions(self, f, path):
        return report.read_regions(f, path)

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict:
        return analysis.analyse(f, values, cycles, window, path)


MACHINE = register(MeshMachine())

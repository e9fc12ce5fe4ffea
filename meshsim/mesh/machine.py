"""The mesh as a machine (meshsim.machine): a WSE-2-style grid of PEs (docs/mesh.md).

Its parts are imported when first used: reading a scenario asks for the machine's checks alone.
"""

from __future__ import annotations

import math

from ..machine import Machine, register
from . import checks, keys

#: The workload types the mesh runs (workload.type).
WORKLOADS = ("uniform", "hotspot", "skewed", "trace", "traffic", "layer_pipeline", "decode")


def _decoding(scenario) -> bool:
    return scenario.get("workload", "type") == "decode"


class MeshMachine(Machine):
    name = "mesh"
    unit = "cycle"
    unit_label = "PEs"
    busy_dataset = "units/busy_cycles"
    target_li = 0.98
    workloads = WORKLOADS
    params = keys.PARAMS
    presets = keys.PRESETS
    default_preset = keys.DEFAULT_PRESET
    resumable = True
    compile_seconds = 110  # measured: a fresh Numba cache, two cores (docs/design.md, "Performance")

    def compile_scenario(self, scenario):
        if _decoding(scenario):
            from .decode import decode_spec

            return decode_spec(scenario)
        from .sim import compile_scenario

        return compile_scenario(scenario)

    def validate(self, scenario) -> None:
        # what a run would refuse, without building the rate map: the trace, and the layer
        # pipeline's placement, task lengths and weights
        if scenario.get("workload", "type") == "trace":
            from .trace import load_trace

            load_trace(scenario.trace_path, scenario.get("machine", "rows"), scenario.get("machine", "cols"))
        if scenario.get("workload", "type") == "layer_pipeline":
            from .pipeline import build

            build(scenario)
        if _decoding(scenario):
            from .decode import decode_spec

            return decode_spec(scenario)
        return None

    def default_threads(self, inputs) -> int:
        from .sim import default_threads

        if hasattr(inputs, "p"):  # a decode run's spec
            return default_threads(inputs.p * inputs.p)
        return default_threads(inputs.rows * inputs.cols)

    def trace_events(self, f, values: dict, timeline) -> None:
        from .perfetto import trace_events

        if values.get("workload", {}).get("type") == "decode":
            from ..export import generation_events

            return generation_events(f, timeline, "row of PEs")
        trace_events(f, values, timeline)

    def check_scenario(self, ok, get, add, shown, path=None) -> None:
        checks.check_scenario(ok, get, add, shown, path)

    def start(self, scenario, inputs, per_call: int | None = None):
        if _decoding(scenario):
            from .decode import DecodeRun

            return DecodeRun(scenario, inputs, per_call)
        from .run import MeshRun

        return MeshRun(scenario, inputs, per_call)

    def open_writer(self, path, scenario, run, threads: int):
        return run.open_writer(path, threads)

    def describe(self, label: str, scenario, inputs) -> str:
        m = scenario.values["machine"]
        if _decoding(scenario):
            w = scenario.values["workload"]
            return (f"{label}: valid ({self.name} region {m['rows']} x {m['cols']}, decode of {w['output_tokens']:,} "
                    f"tokens after {w['context']:,}, cache {w['kv_policy']}; the cache holds at most "
                    f"{inputs.longest_context():,} tokens)")
        return (f"{label}: valid ({self.name} {m['rows']} x {m['cols']}, {scenario.get('workload', 'type')} workload, "
                f"migration {scenario.get('migration', 'policy')}, {scenario.get('run', 'cycles'):,} cycles)")

    def bench(self, quick: bool = False, cycles: int = 300, log=print) -> dict:
        from .bench import measure

        return measure(quick=quick, cycles=cycles, log=log)

    def platform_presets(self) -> dict:
        from ..roofline import Platform

        return {"wse2": Platform("WSE-2", keys.WSE2_PEAK_FLOPS, keys.WSE2_SRAM_BYTES_PER_SECOND, "SRAM")}

    def platform(self, values: dict):
        from ..roofline import Platform

        # the PEs at pe_flops_per_cycle and clock_ghz, with their SRAM ports (docs/mesh.md, "The PE and
        # the wavelets"); with weight streaming, the weights come in at workload.weight_bandwidth_gbps:
        # a second roof
        from ..transformer import compute_rate

        m, w = values["machine"], values["workload"]
        n = m["rows"] * m["cols"]
        streamed = w.get("type") == "layer_pipeline" and w.get("weight_streaming")
        rate = float(compute_rate(w["precision"], m["fp32_rate"])) if "precision" in w else 1.0
        return Platform(f"mesh {m['rows']} x {m['cols']}", n * m["pe_flops_per_cycle"] * rate * m["clock_ghz"] * 1e9,
                        n * (m["sram_read_bytes_per_cycle"] + m["sram_write_bytes_per_cycle"]) * m["clock_ghz"] * 1e9,
                        "SRAM",
                        weight_bandwidth=w["weight_bandwidth_gbps"] * 1e9 if streamed else None)

    def judged(self, analysis: dict) -> dict:
        # a layer pipeline is judged in its steady state, over the PEs its regions hold; the fill
        # (the first chunk crossing the wafer) is reported apart
        w = analysis["whole"]
        if math.isfinite(w.get("li_active_steady", math.nan)):
            return dict(figure="li_active_steady", what=f"busy-time LI over the pipeline's PEs in the steady state, "
                        f"from cycle {w['steady_from_cycle']:,}; the fill before it is li_fill")
        if "li_active" in w:
            return dict(figure="li_active", what="busy-time LI over the pipeline's PEs, the whole run (no steady "
                        "state: the first chunk did not finish, or the file keeps no per-window busy cycles)")
        return super().judged(analysis)

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list:
        from . import report

        if "decode_tokens" in summary:
            from .decode import summary_lines

            return summary_lines(summary)
        return report.summary_lines(summary, regions)

    def read_regions(self, f, path):
        from . import report

        return report.read_regions(f, path)

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict | None:
        from . import analysis

        if values.get("workload", {}).get("type") == "decode":
            return None  # the load balance of units/busy_cycles (meshsim.analysis.busy_only)
        return analysis.analyse(f, values, cycles, window, path)


MACHINE = register(MeshMachine())

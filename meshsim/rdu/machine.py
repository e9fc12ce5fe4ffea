"""The rdu as a machine (meshsim.machine): a SambaNova-style dataflow chip (docs/rdu.md).

Its parts are imported when first used: reading a scenario asks for the machine's checks alone.
"""

from __future__ import annotations

import math

from ..machine import Machine, register
from . import checks, keys


def _decoding(scenario) -> bool:
    return scenario.get("workload", "type") == "decode"


class RduMachine(Machine):
    name = "rdu"
    unit = "section"
    unit_label = "PCUs"
    summary_only = True
    compile_seconds = 6  # measured: a fresh Numba cache, two cores (docs/design.md, "Performance")
    busy_dataset = "units/pcu_busy_cycles"
    target_li = 0.85
    workloads = ("transformer", "decode")
    params = keys.PARAMS
    presets = keys.PRESETS
    default_preset = keys.DEFAULT_PRESET
    levers = checks.LEVERS

    def compile_scenario(self, scenario):
        if _decoding(scenario):
            from .decode import decode_spec

            return decode_spec(scenario)
        from .compiler import compile_scenario

        return compile_scenario(scenario)

    def start(self, scenario, inputs, per_call: int | None = None):
        if _decoding(scenario):
            from .decode import RduDecodeRun

            return RduDecodeRun(scenario, inputs, per_call)
        from .run import RduRun

        return RduRun(inputs, per_call)

    def open_writer(self, path, scenario, run, threads: int):
        return run.open_writer(path, scenario, threads)

    def trace_events(self, f, values: dict, timeline) -> None:
        from .perfetto import trace_events

        if values.get("workload", {}).get("type") == "decode":
            from ..export import generation_events

            return generation_events(f, timeline, "socket")
        trace_events(f, values, timeline)

    def check_scenario(self, ok, get, add, shown, path=None) -> None:
        checks.check_scenario(ok, get, add, shown)

    def describe(self, label: str, scenario, inputs) -> str:
        m, w = scenario.values["machine"], scenario.values["workload"]
        if _decoding(scenario):
            from .decode import longest_context

            return (f"{label}: valid (rdu {m['preset']}, decode of {w['output_tokens']:,} tokens after "
                    f"{w['context']:,} on {w['parallelism']}; the memory holds at most "
                    f"{longest_context(inputs):,} positions)")
        return (f"{label}: valid (rdu {m['preset']}, {inputs.chips_total} chip(s) {w['parallelism']}, fusion "
                f"{w['fusion']}: {len(inputs.sections)} sections, {int(inputs.n_instances.sum())} to run)")

    def bench(self, quick: bool = False, cycles: int = 300, log=print) -> dict:
        from .bench import measure

        return measure(quick=quick, cycles=cycles, log=log)

    def platform_presets(self) -> dict:
        from ..roofline import rdu_platform

        return {name: rdu_platform(name.upper(), chip) for name, chip in keys.PRESETS.items()}

    def platform(self, values: dict):
        from ..roofline import rdu_platform
        from ..transformer import compute_rate

        m, precision = values["machine"], values.get("workload", {}).get("precision")
        rate = compute_rate(precision, m["fp32_rate"]) if precision else 1  # the 16-bit peak without a model
        # a generation streams from the HBM where there is one; a compiled step's sections from DDR
        keys = m if values.get("workload", {}).get("type") == "decode" else {**m, "hbm_gib": 0}
        return rdu_platform(f"rdu {m['preset']} ({m['pcus']} PCUs{', ' + precision if precision else ''})", keys, rate)

    def roofline_kernels(self, values: dict, platform) -> list:
        if values.get("workload", {}).get("type") == "decode":
            from .decode import roofline_rows

            return roofline_rows(values, platform)
        from .compiler import roofline_rows

        return roofline_rows(values, platform)

    def summary_lines(self, summary: dict, regions: dict | None = None) -> list:
        from . import report

        if "decode_tokens" in summary:
            from .decode import summary_lines

            return summary_lines(summary)
        return report.summary_lines(summary, regions)

    def judged(self, analysis: dict) -> dict:
        # the PCUs a section leaves idle are the compiler's allocation, reported apart and named in
        # the verdict; a file without the figure (written before it) is judged on the whole chip
        w = analysis["whole"]
        if not math.isfinite(w.get("li_occupied", math.nan)):
            return super().judged(analysis)
        return dict(figure="li_occupied", what=f"busy-time LI over the PCUs each section holds, weighted by its "
                    f"cycles; the verdict leaves out the allocation: the sections hold "
                    f"{w['pcu_alloc_mean']:.3g} of the PCUs on average (pcu_alloc_mean), "
                    f"{w['pcu_alloc_max']:.3g} at most")

    def analyse(self, f, values: dict, cycles: int, window, path) -> dict:
        from . import analysis

        if values.get("workload", {}).get("type") == "decode":
            from ..analysis import busy_only

            return busy_only(f, "units/socket_busy_cycles", cycles, path)
        return analysis.analyse(f, values, cycles, window, path)


MACHINE = register(RduMachine())

"""The rdu's part of `meshsim bench` (meshsim.bench; docs/design.md, "Performance"): one training step
of a 24-layer, hidden-4,096 model on an SN30, in a fresh process, cold and cached."""

from __future__ import annotations

from pathlib import Path

from ..bench import FRESH_RUN, cold_and_cached

#: The shipped scenarios the bench runs.
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def measure(quick: bool = False, cycles: int = 300, log=print) -> dict:
    """The rdu: one training step of a 24-layer, hidden-4,096 model on an SN30, in a fresh process, with an
    empty and with a warm compilation cache."""
    fig = {}
    rdu = SCENARIOS / "rdu_sn30_train_h4096.toml"
    if rdu.is_file():
        over = repr(["workload.n_layers=2"] if quick else [])
        cold, warm = cold_and_cached(FRESH_RUN.format(over=over, keys=("cycles", "intervals", "step_seconds")), rdu)
        fig["rdu_step_process_seconds_cold"] = cold["process"]
        fig["rdu_step_process_seconds_cached"] = warm["process"]
        fig["rdu_step_run_wall_seconds"] = warm["wall"]
        fig["rdu_step_kernel_seconds"] = warm["kernel"]
        fig["rdu_step_cycles"] = warm["cycles"]
        fig["rdu_step_intervals"] = warm["intervals"]
        fig["rdu_step_peak_memory_bytes"] = warm["peak_bytes"]
        fig["rdu_simulated_cycles_per_second"] = warm["cycles"] / warm["kernel"]
        log(f"rdu, {'2' if quick else '24'}-layer hidden-4096 training step on an SN30 ({warm['cycles']:,} cycles, "
            f"{warm['step_seconds']:.2f} s of machine time): {cold['process']:.2f} s in a fresh process compiling, "
            f"{warm['process']:.2f} s cached ({warm['wall']:.2f} s run, {warm['kernel']:.2f} s in the kernel for "
            f"{warm['intervals']:,} intervals); peak memory {warm['peak_bytes'] / 2**30:.2f} GiB")
    return fig

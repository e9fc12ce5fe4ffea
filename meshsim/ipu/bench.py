"""The ipu's part of `meshsim bench` (meshsim.bench; docs/design.md, "Performance"): 100 training steps
of a 24-layer model over 8 IPUs, in a fresh process, cold and cached."""

from __future__ import annotations

from pathlib import Path

from ..bench import FRESH_RUN, cold_and_cached

#: The shipped scenarios the bench runs.
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def measure(quick: bool = False, cycles: int = 300, log=print) -> dict:
    """The ipu: 100 training steps of a 24-layer model over 8 IPUs, in a fresh process, with an empty
    and with a warm compilation cache."""
    fig = {}
    ipu = SCENARIOS / "ipu_gpt2_24l_8ipu.toml"
    if ipu.is_file():
        over = repr(["run.steps=5"] if quick else [])
        cold, warm = cold_and_cached(FRESH_RUN.format(over=over, keys=("steps", "supersteps", "cycles")), ipu)
        fig["ipu_process_seconds_cold"] = cold["process"]
        fig["ipu_process_seconds_cached"] = warm["process"]
        fig["ipu_run_wall_seconds"] = warm["wall"]
        fig["ipu_kernel_seconds"] = warm["kernel"]
        fig["ipu_supersteps"] = warm["supersteps"]
        fig["ipu_supersteps_per_second"] = warm["supersteps"] / warm["wall"]
        fig["ipu_peak_memory_bytes"] = warm["peak_bytes"]
        log(f"ipu, {warm['steps']} training steps of a 24-layer model over 8 GC200s ({warm['supersteps']:,} "
            f"supersteps, {warm['cycles']:,} cycles): {cold['process']:.2f} s in a fresh process compiling, "
            f"{warm['process']:.2f} s cached ({warm['wall']:.2f} s run, {warm['kernel']:.3f} s in the kernel); "
            f"peak memory {warm['peak_bytes'] / 2**30:.2f} GiB")
    return fig

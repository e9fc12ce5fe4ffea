"""The rdu's own scenario keys and presets: its rows of the parameter table (meshsim.params composes
every machine's rows with the shared ones), in table order, and the chips whose figures
machine.preset fills them with.

docs/rdu.md gives their semantics and the presets' sources; the parameter reference
(docs/parameters.md) is generated from them.
"""

from __future__ import annotations

from ..params import Param

_RDU = ("machine.type", ("rdu",))

#: The values `meshsim calibrate meshsim/data/accuracy.csv` fits to the SN30 measurements of the shipped
#: table (docs/rdu.md, "Calibration"); the SN10 takes the SN30's, an assumption (no SN10 table is shipped).
RDU_FITTED = dict(section_switch_cycles=20_959_497, host_seconds=1.470405421687798,
                  section_fill=1.4414378853308898, pcu_place_limit=0.8175651090807622)

#: RDU presets (docs/rdu.md, "Presets and their sources"): the values machine.preset gives the keys a
#: scenario does not set. clock_ghz is not published: it makes PCUs x lanes x stages x 2 FLOPs per
#: cycle equal the published peak BF16 rate (SN10 320 TFLOP/s, SN30 688 TFLOP/s). fp32_rate is not
#: published: an assumption, the WSE-2's ratio. chip_tiles: SambaNova's documentation (SN10 4 tiles per
#: RDU, SN30 8).
PRESETS = {
    "sn10": dict(pcus=640, pcu_lanes=16, pcu_stages=6, pmus=640, pmu_kib=512, pmu_bytes_per_cycle=90,
                 ddr_bandwidth_gbps=100.0, clock_ghz=round(320e12 / (640 * 16 * 6 * 2) / 1e9, 3), fp32_rate=0.5,
                 chip_tiles=4, **RDU_FITTED),
    "sn30": dict(pcus=1280, pcu_lanes=16, pcu_stages=6, pmus=1280, pmu_kib=512, pmu_bytes_per_cycle=90,
                 ddr_bandwidth_gbps=200.0, clock_ghz=round(688e12 / (1280 * 16 * 6 * 2) / 1e9, 3), fp32_rate=0.5,
                 chip_tiles=8, **RDU_FITTED),
    # SN40L (Prabhakar et al., MICRO 2024), per socket: 1,040 PCUs and PMUs, 64 GiB of HBM at about
    # 1.6-1.8 TB/s (the lower taken), DDR at about 100-200 GB/s (the upper), 638 BF16 TFLOP/s; lanes,
    # stages, PMU bandwidth, fp32_rate, chip_tiles and the fitted keys as the SN30's (assumptions)
    "sn40l": dict(pcus=1040, pcu_lanes=16, pcu_stages=6, pmus=1040, pmu_kib=512, pmu_bytes_per_cycle=90,
                  ddr_bandwidth_gbps=200.0, clock_ghz=round(638e12 / (1040 * 16 * 6 * 2) / 1e9, 3), fp32_rate=0.5,
                  chip_tiles=8, hbm_gib=64, hbm_bandwidth_gbps=1600.0, ddr_gib=1536, **RDU_FITTED),
}

#: The preset a scenario that names none gets.
DEFAULT_PRESET = "sn30"

# The rdu keys' defaults are the default preset's (sn30).
_SN30 = PRESETS["sn30"]

PARAMS: tuple[Param, ...] = (
    Param("machine", "pcus", "int", "PCUs", _SN30["pcus"],
          "Pattern compute units per chip (preset: SN10 640, SN30 1,280).", (1, 1_000_000), _RDU),
    Param("machine", "pcu_lanes", "int", "lanes", _SN30["pcu_lanes"],
          "SIMD lanes per PCU: output columns a PCU computes in one pass (preset 16).", (1, 1024), _RDU),
    Param("machine", "pcu_stages", "int", "stages", _SN30["pcu_stages"],
          "Pipeline stages per PCU: multiply-adds per lane per cycle, and cycles to fill (preset 6).",
          (1, 64), _RDU),
    Param("machine", "pmus", "int", "PMUs", _SN30["pmus"],
          "Pattern memory units per chip (preset: SN10 640, SN30 1,280).", (1, 1_000_000), _RDU),
    Param("machine", "pmu_kib", "int", "KiB", _SN30["pmu_kib"],
          "Scratchpad of each PMU (preset 512 KiB).", (1, 1_048_576), _RDU),
    Param("machine", "pmu_bytes_per_cycle", "int", "bytes/cycle", _SN30["pmu_bytes_per_cycle"],
          "Bandwidth of each PMU to its PCUs (preset 90, from 150 TB/s over 640 PMUs).", (1, 1_000_000), _RDU),
    Param("machine", "ddr_bandwidth_gbps", "float", "GB/s", _SN30["ddr_bandwidth_gbps"],
          "Off-chip DDR bandwidth of each chip (preset: SN10 100, SN30 200).", (0.001, 1e6), _RDU),
    Param("machine", "ddr_burst_kib", "int", "KiB", 256,
          "Size of one DDR transfer; the weight, load and store streams take turns burst by burst.",
          (1, 1_048_576), _RDU),
    Param("machine", "section_switch_cycles", "int", "cycles", _SN30["section_switch_cycles"],
          "Cycles every section instance costs before it runs: its configuration and program load and the "
          "synchronisation with the section before (not published: fitted to the SN30's chip time per step, "
          "docs/rdu.md, \"Calibration\").", (0, 10_000_000_000), _RDU),
    Param("machine", "chip_tiles", "int", "tiles", _SN30["chip_tiles"],
          "Tiles of one chip, each an equal share of its PCUs, PMUs and DDR channels (preset: SN10 4, SN30 8; "
          "SambaNova's documentation).", (1, 1024), _RDU),
    Param("machine", "num_tiles", "int", "tiles", 0,
          "Tiles the program is compiled for, as SambaFlow's --num-tiles: the run gets num_tiles / chip_tiles "
          "of the chip's PCUs, PMUs and DDR bandwidth (0: the whole chip; docs/rdu.md, \"Presets\").",
          (0, 1024), _RDU),
    Param("machine", "buffer_tiles", "int", "tiles", 2,
          "Tiles each stage's input buffer holds (2: double buffering).", (1, 64), _RDU),
    Param("machine", "elastic_pmus", "bool", "", True,
          "Give the PMUs a section leaves over to its GEMMs, in proportion to their FLOPs, for PMU "
          "bandwidth.", None, _RDU),
    Param("machine", "placement", "str", "", "spread",
          "Where a section's operators sit on the PCUs: spread, the PCUs a section leaves free shared "
          "out as equal gaps before, between and after its operators; packed, every operator after the "
          "one before from PCU 0 (docs/rdu.md, \"Allocation\").", ("spread", "packed"), _RDU),
    Param("machine", "section_fill", "float", "", _SN30["section_fill"],
          "o3 merges o1's sections while the column groups their operators need (one PCU per pcu_lanes "
          "output columns) stay within this share of the PCUs (above 1: a section's PCUs take more than one "
          "column group each); fitted to the SN30 compiler's section counts (docs/rdu.md, \"Sections\" and "
          "\"Calibration\").", (0.01, 4.0), _RDU),
    Param("machine", "pcu_place_limit", "float", "", _SN30["pcu_place_limit"],
          "The largest share of the PCUs one section's operators are placed on (the placer leaves the rest "
          "to routing); fitted to the SN30 compiler's highest PCU utilisation (docs/rdu.md, \"Allocation\" "
          "and \"Calibration\").", (0.01, 1.0), _RDU),
    Param("machine", "interconnect_gbps", "float", "GB/s", 100.0,
          "Chip-to-chip bandwidth per chip within a node, for collectives and pipeline transfers (an "
          "assumption).", (0.001, 1e6), _RDU),
    Param("machine", "interconnect_latency_cycles", "int", "cycles", 2000,
          "Latency of one chip-to-chip transfer step within a node (an assumption).", (0, 1_000_000_000), _RDU),
    Param("machine", "chips_per_node", "int", "chips", 8,
          "Chips in one node (an SN30 DataScale node holds 8); the chips of workload.parallelism are "
          "numbered tensor first, then pipeline, then data, and fill the nodes in order.", (1, 4096), _RDU),
    Param("machine", "node_interconnect_gbps", "float", "GB/s", 25.0,
          "Bandwidth per chip between nodes (an assumption: 200 Gb/s of network per chip), for any "
          "collective or transfer whose chips are not all in one node.", (0.001, 1e6), _RDU),
    Param("machine", "node_interconnect_latency_cycles", "int", "cycles", 20000,
          "Latency of one transfer step between nodes (an assumption, about 7 us).", (0, 1_000_000_000), _RDU),
    Param("machine", "hbm_gib", "int", "GiB", 0,
          "HBM of each chip, which a generation streams its weights and key-value cache from (preset: SN40L "
          "64; SN10 and SN30 0: none, a generation streams from DDR; docs/rdu.md, \"Generation\").",
          (0, 1_048_576), _RDU),
    Param("machine", "hbm_bandwidth_gbps", "float", "GB/s", 0.0,
          "HBM bandwidth of each chip (preset: SN40L 1,600, the lower of the published 1.6-1.8 TB/s; 0 without "
          "HBM).", (0.0, 1e6), _RDU),
    Param("machine", "ddr_gib", "int", "GiB", 1536,
          "DDR of each chip, which holds the models a generation switches between (SN40L: up to 1.5 TiB; taken "
          "for every preset).", (1, 1_048_576), _RDU),
    Param("machine", "stream_efficiency", "float", "", 0.85,
          "Generation: the share of the memory's bandwidth a kernel's stream of weights and cache reaches (the "
          "SN40L paper: more than 85% of HBM bandwidth while decoding).", (0.01, 1.0), _RDU),
    Param("machine", "orchestration", "str", "", "hardware",
          "Generation: who starts each kernel call: hardware (the chip itself) or software (the host, adding "
          "machine.host_launch_us to every call).", ("hardware", "software"), _RDU),
    Param("machine", "kernel_launch_cycles", "int", "cycles", 3000,
          "Generation: cycles a kernel call's start costs on the chip, its synchronisation with the call before "
          "(an assumption).", (0, 1_000_000_000), _RDU),
    Param("machine", "host_launch_us", "float", "us", 10.0,
          "Generation with software orchestration: what the host adds to every kernel call's start (an "
          "assumption).", (0.0, 1e6), _RDU),
    Param("workload", "fusion", "str", "", "o1",
          "How operators are fused into sections: o0 one per section, o1 by rules (LayerNorm and "
          "elementwise into their GEMMs), o3 o1's sections merged within machine.section_fill of the PCUs, "
          "with each layer's attention one operator that never writes its scores.", ("o0", "o1", "o3"), _RDU),
    Param("workload", "tile_tokens", "int", "tokens", 64,
          "Tokens per tile streamed through a section; must divide the tokens of a microbatch.",
          (1, 1_048_576), _RDU),
    Param("workload", "parallelism", "str", "", "T1P1D1",
          "Chips as T<tensor>P<pipeline>D<data> degrees, e.g. T4P2D1 on 8 chips.", None, _RDU),
    Param("workload", "prefetch", "bool", "", True,
          "Load the next section's weights into the PMUs the running section leaves free.", None,
          _RDU),
)

"""The one parameter table: each scenario key's type, unit, default, allowed values and meaning.

docs/design.md, "Scenario files". Validation and defaults (`meshsim.scenario`) and the README's parameter
reference (`meshsim.docs`) are all generated from `PARAMS`; a key that is not in this table does
not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .machine import names as machine_names

#: The value types a parameter may have. "regions" is a list of [row0, col0, row1, col1] integer
#: lists: half-open rectangles of PEs, rows row0..row1-1 and columns col0..col1-1; "ints" a list of
#: integers, each in the key's allowed range.
TYPES = ("int", "float", "str", "bool", "regions", "ints")

#: The largest grid the mesh accepts, in PEs (room for the whole WSE-2 fabric, 757 x 996, and more).
MAX_MESH_PES = 4_194_304

#: Workload types whose tasks are Bernoulli injections with a work distribution (docs/mesh.md).
BERNOULLI_WORKLOADS = ("uniform", "hotspot", "skewed")


@dataclass(frozen=True)
class Param:
    """One scenario key (docs/design.md, "Scenario files").

    section, name: the key is written `name = ...` under `[section]`; its path is `section.name`.
    type: one of TYPES.
    unit: the unit of the value ("" when it has none); also carried in the name where it has one.
    default: the value used when the scenario does not set the key (a tuple stands for a TOML list).
    description: one line saying what the key means.
    allowed: an inclusive (lo, hi) numeric range, a tuple of allowed strings (or a function giving
        them: machine.type's are the registry's, meshsim.machine.names), or None (any value of the
        type).
    applies_when: None, or ("section.key", values): the key only means something when that other
        key has one of those values; setting it otherwise is an error.
    """

    section: str
    name: str
    type: str
    unit: str
    default: object
    description: str
    allowed: tuple | Callable | None = None
    applies_when: tuple[str, tuple] | None = None

    @property
    def path(self) -> str:
        """The key path `section.name`, as written in overrides and messages."""
        return f"{self.section}.{self.name}"

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The allowed strings of a "str" key with a fixed set of values, else None."""
        if self.type == "str" and self.allowed is not None:
            return tuple(self.allowed() if callable(self.allowed) else self.allowed)
        return None

    @property
    def range(self) -> tuple | None:
        """The inclusive (lo, hi) range of an "int" or "float" key (of each item of an "ints" key),
        else None."""
        if self.type in ("int", "float", "ints") and self.allowed is not None:
            return tuple(self.allowed)
        return None

    def default_value(self):
        """A fresh copy of the default, as the value a TOML file would give (lists, not tuples)."""
        if isinstance(self.default, tuple):
            return [list(item) if isinstance(item, tuple) else item for item in self.default]
        return self.default


_BERNOULLI = ("workload.type", BERNOULLI_WORKLOADS)
_TRAFFIC = ("workload.type", ("traffic",))
_PIPELINE = ("workload.type", ("layer_pipeline",))
_MODEL = ("workload.type", ("layer_pipeline", "transformer"))
_MESH = ("machine.type", ("mesh",))
_RDU = ("machine.type", ("rdu",))
_IPU = ("machine.type", ("ipu",))
_RESUMABLE = ("machine.type", ("mesh", "ipu"))
_RDU_IPU = ("machine.type", ("rdu", "ipu"))

#: The values `meshsim calibrate meshsim/data/accuracy.csv` fits to the SN30 measurements of the shipped
#: table (docs/rdu.md, "Calibration"); the SN10 takes the SN30's, an assumption (no SN10 table is shipped).
RDU_FITTED = dict(section_switch_cycles=20_959_497, host_seconds=1.470405421687798,
                  section_fill=1.4414378853308898, pcu_place_limit=0.8175651090807622)

#: RDU presets (docs/rdu.md, "Presets and their sources"): the values machine.preset gives the keys a
#: scenario does not set. clock_ghz is not published: it makes PCUs x lanes x stages x 2 FLOPs per
#: cycle equal the published peak BF16 rate (SN10 320 TFLOP/s, SN30 688 TFLOP/s). fp32_rate is not
#: published: an assumption, the WSE-2's ratio. chip_tiles: SambaNova's documentation (SN10 4 tiles per
#: RDU, SN30 8).
RDU_PRESETS = {
    "sn10": dict(pcus=640, pcu_lanes=16, pcu_stages=6, pmus=640, pmu_kib=512, pmu_bytes_per_cycle=90,
                 ddr_bandwidth_gbps=100.0, clock_ghz=round(320e12 / (640 * 16 * 6 * 2) / 1e9, 3), fp32_rate=0.5,
                 chip_tiles=4, **RDU_FITTED),
    "sn30": dict(pcus=1280, pcu_lanes=16, pcu_stages=6, pmus=1280, pmu_kib=512, pmu_bytes_per_cycle=90,
                 ddr_bandwidth_gbps=200.0, clock_ghz=round(688e12 / (1280 * 16 * 6 * 2) / 1e9, 3), fp32_rate=0.5,
                 chip_tiles=8, **RDU_FITTED),
}

# The rdu keys' defaults are the default preset's (sn30).
_SN30 = RDU_PRESETS["sn30"]

#: IPU presets (docs/ipu.md, "Presets and their sources"). macs_per_cycle makes tiles x MACs x 2 x
#: clock the published 16-bit peak (GC200 250, Bow 350, GC2 124.5 TFLOP/s); fp32_rate the published
#: fp32 peak over it (62.5 of 250, 87.5 of 350, 31.1 of 124.5).
IPU_PRESETS = {
    "gc200": dict(tiles=1472, tile_sram_kib=624, clock_ghz=1.33, macs_per_cycle=64, worker_threads=6,
                  exchange_bytes_per_cycle=4, ipu_link_gbps=320.0, streaming_memory_gbps=20.0, fp32_rate=0.25),
    "bow": dict(tiles=1472, tile_sram_kib=624, clock_ghz=1.85, macs_per_cycle=64, worker_threads=6,
                exchange_bytes_per_cycle=4, ipu_link_gbps=320.0, streaming_memory_gbps=20.0, fp32_rate=0.25),
    "gc2": dict(tiles=1216, tile_sram_kib=256, clock_ghz=1.6, macs_per_cycle=32, worker_threads=6,
                exchange_bytes_per_cycle=4, ipu_link_gbps=320.0, streaming_memory_gbps=20.0, fp32_rate=0.25),
}

#: The preset a machine type uses when the scenario names none.
DEFAULT_PRESET = {"rdu": "sn30", "ipu": "gc200"}
#: The presets of each machine that has them, by machine.type.
PRESETS = {"rdu": RDU_PRESETS, "ipu": IPU_PRESETS}

# The ipu keys' defaults are the default preset's (gc200).
_GC200 = IPU_PRESETS["gc200"]

#: WSE-2: a PE's SIMD units do 4 16-bit multiply-adds a cycle, 8 FLOPs (850,000 PEs at 1.1 GHz: 7.5 PFLOP/s).
WSE2_PE_FLOPS_PER_CYCLE = 8.0

PARAMS: tuple[Param, ...] = (
    # [run]
    Param("run", "name", "str", "", "",
          "Name of the run, used for the default result file name; empty means the scenario "
          "file's stem."),
    Param("run", "cycles", "int", "cycles", 1000,
          "Number of cycles to simulate (per-PE counters are 32-bit, which bounds a run); an rdu "
          "run simulates one step, however many cycles it takes, an ipu run run.steps steps.",
          (1, 100_000_000), _MESH),
    Param("run", "steps", "int", "steps", 1,
          "Training (or inference) steps an ipu run simulates, one after another.", (1, 1_000_000), _IPU),
    Param("run", "seed", "int", "", 1,
          "Seed of every random draw; the same seed gives bit-identical results.", (0, 2**63 - 1)),
    Param("run", "threads", "int", "threads", 0,
          "Worker threads; 0 means one per 32,768 PEs (what a shared host rewards; docs/mesh.md, \"Threads\"), "
          "up to the cores the process may run on, and one for the rdu and the ipu, whose kernels are serial. "
          "Results do not depend on it.",
          (0, 1024)),
    Param("run", "window_cycles", "int", "cycles", 100,
          "Length of the windows over which LI is computed (an rdu run computes it per section).",
          (1, 1_000_000_000), _MESH),
    # [machine]
    Param("machine", "type", "str", "", "mesh",
          "The machine model: mesh is a WSE-2-style 2D mesh of PEs, rdu a SambaNova-style "
          "reconfigurable dataflow chip (docs/rdu.md), ipu Graphcore-style bulk-synchronous tiles "
          "(docs/ipu.md).", machine_names),
    Param("machine", "rows", "int", "PEs", 757,
          "Rows of PEs in the mesh (the WSE-2 fabric usable by programs is 757 x 996).", (1, 4096), _MESH),
    Param("machine", "cols", "int", "PEs", 996,
          "Columns of PEs in the mesh.", (1, 4096), _MESH),
    Param("machine", "queue_capacity", "int", "tasks", 16,
          "Capacity of each PE's FIFO task queue; a task offered to a full queue is refused.",
          (1, 255), _MESH),
    Param("machine", "hop_latency_cycles", "int", "cycles", 1,
          "Cycles a message takes from one PE to its neighbour (1 or 2 on the WSE-2).", (1, 8), _MESH),
    Param("machine", "link_messages_per_cycle", "int", "messages/cycle", 1,
          "Messages each link carries per cycle.", (1, 4), _MESH),
    Param("machine", "link_buffer_messages", "int", "messages", 2,
          "Receive buffer of each link, in messages (the sender's credits); at least "
          "link_messages_per_cycle.", (1, 64), _MESH),
    Param("machine", "credit_delay_cycles", "int", "cycles", 1,
          "Cycles a freed buffer slot takes to return to the sender as a credit.", (1, 8), _MESH),
    Param("machine", "router_queue_packets", "int", "packets", 4,
          "Capacity of each router output queue (four directions and ejection), for routed packets.",
          (1, 48), ("workload.type", ("traffic", "layer_pipeline"))),
    Param("machine", "clock_ghz", "float", "GHz", 1.1,
          "Clock frequency; the mesh uses it only to convert cycles to seconds in reports; for rdu "
          "and ipu the preset sets it (see docs/rdu.md, docs/ipu.md) unless the scenario does.",
          (0.001, 100.0)),
    Param("machine", "pe_flops_per_cycle", "float", "FLOPs/cycle", WSE2_PE_FLOPS_PER_CYCLE,
          "Peak 16-bit FLOPs of one PE per cycle, its SIMD width (WSE-2: 4 fp16 multiply-adds, 8 FLOPs; "
          "850,000 PEs at 1.1 GHz are 7.5 PFLOP/s); fp32 at machine.fp32_rate of it.",
          (0.001, 1e6), _PIPELINE),
    Param("machine", "sram_read_bytes_per_cycle", "int", "bytes/cycle", 16,
          "Bytes a PE's SRAM ports read per cycle for its arithmetic (WSE-2: two 64-bit reads); a PE's rate "
          "for an operator is bounded by the operands it must read (docs/mesh.md, \"The PE and the wavelets\").",
          (1, 4096), _PIPELINE),
    Param("machine", "sram_write_bytes_per_cycle", "int", "bytes/cycle", 8,
          "Bytes a PE's SRAM ports write per cycle (WSE-2: one 64-bit write).", (1, 4096), _PIPELINE),
    Param("machine", "wavelet_bytes", "int", "bytes", 4,
          "Bytes of one wavelet, the message a link carries (WSE-2: 32 bits): a token's activation "
          "vector crosses a link as its bytes over this many messages.", (1, 4096), _PIPELINE),
    Param("machine", "fp32_rate", "float", "", 0.5,
          "Compute rate at fp32, and at tf32 (which none of these machines has units for, so it computes "
          "as fp32), as a fraction of the 16-bit peak (WSE-2: 2 fp32 FMACs per PE-cycle against 4 at fp16, "
          "0.5; presets: SN10 and SN30 0.5, an assumption; GC200, Bow and GC2 0.25, their published fp32 "
          "peaks). fp8 computes at the 16-bit rate.", (0.001, 1.0), _MODEL),
    Param("machine", "sram_kib", "int", "KiB", 48,
          "SRAM of each PE, which must hold the weights of its region's kernel (48 KiB on the WSE-2).",
          (1, 1_048_576), _PIPELINE),
    Param("machine", "preset", "str", "", "sn30",
          "Chip whose published figures fill the machine keys the scenario does not set: sn10 or sn30 "
          "for rdu (docs/rdu.md), gc200, bow or gc2 for ipu (docs/ipu.md); when not set, sn30 for "
          "rdu and gc200 for ipu.", ("sn10", "sn30", "gc200", "bow", "gc2"), _RDU_IPU),
    Param("machine", "preset_file", "str", "", "",
          "A TOML file whose [machine] table fills the machine keys the scenario does not set, over "
          "machine.preset: the values `meshsim calibrate` fits (relative to the scenario file; docs/design.md, "
          "\"Calibration\"). Empty: none."),
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
    Param("machine", "host_seconds", "float", "s", 0.0,
          "The host's part of every step, outside the chip: input feeding, step launch, the framework's own "
          "work. Reported apart (host_seconds) and added to the chip's time in step_seconds and "
          "samples_per_second (rdu preset: fitted to the SN30's end-to-end rates, docs/rdu.md, "
          "\"Calibration\"; ipu and the mesh's layer pipeline: 0, not measured).", (0.0, 1e6), _MODEL),
    Param("machine", "tiles", "int", "tiles", _GC200["tiles"],
          "Tiles per IPU (preset: GC200 and Bow 1,472, GC2 1,216).", (1, 1_000_000), _IPU),
    Param("machine", "tile_sram_kib", "int", "KiB", _GC200["tile_sram_kib"],
          "SRAM of each tile (preset: GC200 and Bow 624, GC2 256).", (1, 1_048_576), _IPU),
    Param("machine", "macs_per_cycle", "int", "MACs/cycle", _GC200["macs_per_cycle"],
          "16-bit multiply-accumulates a tile does per cycle in a GEMM (preset: 64, GC2 32).", (1, 65536), _IPU),
    Param("machine", "worker_threads", "int", "threads", _GC200["worker_threads"],
          "Hardware threads per tile; they take the tile's issue slots in turn (preset 6).", (1, 64), _IPU),
    Param("machine", "exchange_bytes_per_cycle", "int", "bytes/cycle", _GC200["exchange_bytes_per_cycle"],
          "Bytes a tile sends, and receives, per cycle in an exchange (preset 4: about 8 TB/s on a GC200).",
          (1, 65536), _IPU),
    Param("machine", "ipu_link_gbps", "float", "GB/s", _GC200["ipu_link_gbps"],
          "IPU-Link bandwidth of each IPU, for pipeline transfers and all-reduces (preset 320).", (0.001, 1e6),
          _IPU),
    Param("machine", "streaming_memory_gbps", "float", "GB/s", _GC200["streaming_memory_gbps"],
          "Off-chip streaming memory bandwidth each IPU sees; the token ids stream in from it (preset 20, "
          "an assumption).", (0.001, 1e6), _IPU),
    Param("machine", "sync_cycles", "int", "cycles", 150,
          "Cycles of the chip-wide barrier of every superstep (an assumption).", (0, 1_000_000_000), _IPU),
    Param("machine", "ipu_sync_cycles", "int", "cycles", 5000,
          "Cycles of a barrier across IPUs, paid by every IPU-Link transfer (an assumption).",
          (0, 1_000_000_000), _IPU),
    Param("machine", "ipus_per_node", "int", "IPUs", 16,
          "IPUs joined by IPU-Links in one node (an IPU-POD16); the IPUs are numbered tensor first, then "
          "stage, then replica, and fill the nodes in order (docs/ipu.md, \"Topology\").", (1, 4096), _IPU),
    Param("machine", "node_link_gbps", "float", "GB/s", 6.25,
          "Bandwidth per IPU between nodes (an assumption: an IPU-M2000's two 100 Gb/s gateway links "
          "shared by its four IPUs), for any all-reduce or transfer whose IPUs are not all in one node.",
          (0.001, 1e6), _IPU),
    Param("machine", "node_sync_cycles", "int", "cycles", 20000,
          "Cycles of a barrier across nodes, paid by every transfer between them (an assumption).",
          (0, 1_000_000_000), _IPU),
    Param("machine", "exchange_latency_cycles", "int", "cycles", 30,
          "Cycles from the first byte sent in an exchange to the first received (an assumption).",
          (0, 1_000_000_000), _IPU),
    Param("machine", "vector_flops_per_cycle", "int", "FLOPs/cycle", 16,
          "Elementwise and norm FLOPs a tile does per cycle (an assumption).", (1, 65536), _IPU),
    Param("machine", "gemm_block", "int", "elements", 64,
          "Side of the blocks a GEMM's output and an attention's query rows are cut into; a block is "
          "one unit of work on one tile.", (1, 65536), _IPU),
    Param("machine", "code_kib_per_tile", "int", "KiB", 96,
          "SRAM each tile sets aside for code, vertex state and stacks (an assumption).", (0, 1_048_576), _IPU),
    # [migration]
    Param("migration", "policy", "str", "", "least_loaded",
          "How an overfull PE picks the neighbour it moves a task to (none disables migration): the "
          "least loaded, one at random among those less loaded, diffusion (a share of the depth "
          "difference to each less loaded neighbour; migration.diffusion_rate), gradient (towards "
          "the nearest light PE, down a pressure surface), or work_stealing (an idle PE asks a random "
          "neighbour for a task; requests and refusals are messages on the links).",
          ("none", "least_loaded", "random_lower", "diffusion", "gradient", "work_stealing"), _MESH),
    Param("migration", "threshold", "int", "tasks", 4,
          "A PE migrates only while its queue holds more than this many tasks (work_stealing: gives a "
          "task to a request only then); less than machine.queue_capacity.", (0, 254), _MESH),
    Param("migration", "hysteresis", "int", "tasks", 0,
          "A PE that starts migrating (its queue above threshold) goes on until its queue holds at most "
          "threshold - hysteresis tasks: a high and a low water mark (0: it stops at the threshold); at "
          "most migration.threshold.", (0, 254), _MESH),
    Param("migration", "diffusion_rate", "float", "1", 0.2,
          "diffusion only: the share alpha of the difference between its queue and a neighbour's that a PE "
          "moves to that neighbour in a cycle (Cybenko's alpha; 0.2 = 1 / (neighbours + 1)).", (0.001, 0.5), _MESH),
    Param("migration", "info_delay_cycles", "int", "cycles", 1,
          "Age of the neighbour queue depths a PE decides on (unused by work_stealing).", (1, 8), _MESH),
    Param("migration", "max_per_cycle", "int", "tasks/cycle", 1,
          "Most tasks one PE migrates in one cycle.", (1, 4), _MESH),
    # [workload]
    Param("workload", "type", "str", "", "uniform",
          "Where tasks come from: Bernoulli injection with a uniform, hotspot or lognormal-skewed "
          "rate map, or events read from a trace file; traffic offers routed packets instead "
          "(network studies); layer_pipeline runs a transformer's kernels as a pipeline of regions; "
          "transformer is the rdu's and the ipu's workload (a model compiled into sections, or "
          "mapped onto tiles).",
          ("uniform", "hotspot", "skewed", "trace", "traffic", "layer_pipeline", "transformer")),
    Param("workload", "injection_rate", "float", "tasks/PE/cycle", 0.05,
          "Probability that a PE is offered a task (a packet for traffic) in a cycle (the mean rate "
          "for skewed, the rate outside the hot regions for hotspot).", (0.0, 1.0),
          ("workload.type", BERNOULLI_WORKLOADS + ("traffic",))),
    Param("workload", "work_distribution", "str", "", "fixed",
          "Distribution of a task's work: fixed, uniform in [work_min_cycles, work_max_cycles], "
          "or geometric with mean work_cycles capped at work_max_cycles.",
          ("fixed", "uniform", "geometric"), _BERNOULLI),
    Param("workload", "work_cycles", "int", "cycles", 10,
          "Work of each task for fixed, or the mean for geometric.", (1, 65535),
          ("workload.work_distribution", ("fixed", "geometric"))),
    Param("workload", "work_min_cycles", "int", "cycles", 1,
          "Smallest work of a task for the uniform work distribution.", (1, 65535),
          ("workload.work_distribution", ("uniform",))),
    Param("workload", "work_max_cycles", "int", "cycles", 20,
          "Largest work of a task: the upper bound for uniform, the cap for geometric.",
          (1, 65535), ("workload.work_distribution", ("uniform", "geometric"))),
    Param("workload", "hot_rate", "float", "tasks/PE/cycle", 0.5,
          "Injection rate inside the hot regions.", (0.0, 1.0), ("workload.type", ("hotspot",))),
    Param("workload", "hot_regions", "regions", "PEs", (),
          "Hot rectangles as [row0, col0, row1, col1] (rows row0..row1-1, columns col0..col1-1); "
          "empty means one region in the middle of the grid, a quarter of each side.",
          None, ("workload.type", ("hotspot",))),
    Param("workload", "sigma", "float", "", 1.0,
          "Shape of the lognormal field of per-PE rates (0 gives uniform rates).", (0.0, 10.0),
          ("workload.type", ("skewed",))),
    Param("workload", "pattern", "str", "", "uniform",
          "Destinations of traffic packets: uniform random, transpose (square grids), bit "
          "complement, a random neighbour, or hotspot (hot_fraction of packets to the centre PE).",
          ("uniform", "transpose", "bit_complement", "neighbor", "hotspot"), _TRAFFIC),
    Param("workload", "hot_fraction", "float", "", 0.1,
          "Share of traffic packets sent to the centre PE for the hotspot pattern.", (0.0, 1.0),
          ("workload.pattern", ("hotspot",))),
    Param("workload", "warmup_cycles", "int", "cycles", 1000,
          "Traffic: cycles before the measurement window; packets born then are not measured.",
          (0, 100_000_000), _TRAFFIC),
    Param("workload", "measure_cycles", "int", "cycles", 2000,
          "Traffic: length of the measurement window; only packets born in it are measured.",
          (1, 100_000_000), _TRAFFIC),
    Param("workload", "hidden_size", "int", "elements", 768,
          "Transformer hidden size H (a multiple of n_heads).", (1, 65536), _MODEL),
    Param("workload", "n_layers", "int", "layers", 12,
          "Transformer blocks.", (1, 1024), _MODEL),
    Param("workload", "n_heads", "int", "heads", 12,
          "Attention heads.", (1, 1024), _MODEL),
    Param("workload", "seq_len", "int", "tokens", 1024,
          "Tokens per sequence (a sample); a multiple of tokens_per_chunk.", (1, 1_048_576), _MODEL),
    Param("workload", "batch", "int", "samples", 8,
          "Sequences per step; reports give the time per step.", (1, 1_048_576), _MODEL),
    Param("workload", "ffn_multiplier", "int", "", 4,
          "Feed-forward width as a multiple of the hidden size.", (1, 64), _MODEL),
    Param("workload", "ffn_width", "int", "elements", 0,
          "Feed-forward width F in elements, for widths that are not a multiple of the hidden size (Llama's "
          "intermediate_size); 0 means ffn_multiplier x hidden_size.", (0, 1_048_576), _MODEL),
    Param("workload", "n_kv_heads", "int", "heads", 0,
          "Heads of keys and values: fewer than n_heads is grouped-query attention (n_heads / n_kv_heads "
          "query heads share each); 0 means n_heads. Must divide n_heads.", (0, 1024), _MODEL),
    Param("workload", "mlp", "str", "", "gelu",
          "The feed-forward block: gelu (up, GeLU, down: GPT-2) or gated (gate and up projections, "
          "SiLU(gate) x up, down: Llama's SwiGLU).", ("gelu", "gated"), _MODEL),
    Param("workload", "bias", "bool", "", True,
          "The projections carry biases (GPT-2: true; Llama and Mistral: false).", None, _MODEL),
    Param("workload", "model_config", "str", "", "",
          "Path of a Hugging Face config.json (relative to the scenario file) that fills the model's "
          "shape: the keys of the model that the scenario does not set (docs/design.md, \"Models from a "
          "config.json\"); empty: none.", None, _MODEL),
    Param("workload", "precision", "str", "", "bf16",
          "Element type of weights and activations, and the compute rate: fp32 and tf32 (a 4-byte fp32 "
          "value these machines compute as fp32) at machine.fp32_rate of the 16-bit peak, bf16, fp16 and "
          "fp8 at the peak.", ("fp32", "tf32", "bf16", "fp16", "fp8"), _MODEL),
    Param("workload", "accumulate", "str", "", "fp32",
          "Precision of a matrix kernel's partial sums: same (the model's precision) or fp32 (16-bit "
          "multiplies with fp32 additions, the WSE's mixed-precision multiply-add; the Model Zoo's "
          "mixed_precision: docs/mesh.md, \"The PE and the wavelets\").", ("same", "fp32"), _PIPELINE),
    Param("workload", "training", "bool", "", False,
          "Add the backward kernels (a training step) after the forward ones.", None, _MODEL),
    Param("workload", "optimizer", "str", "", "none",
          "Training: the update at the end of a step (none: not modelled; sgd: 2 FLOPs a parameter; adam: "
          "12, and two fp32 moments of state); where each machine keeps its state and how long it takes: "
          "docs/design.md, \"Metrics\".", ("none", "sgd", "adam"), _MODEL),
    Param("workload", "master_weights", "str", "", "same",
          "Training with an optimizer: \"fp32\" keeps fp32 master weights beside the weights computed with "
          "(mixed precision: 16-bit compute, fp32 update), \"same\" updates the weights in their own "
          "precision.", ("same", "fp32"), _MODEL),
    Param("workload", "replicas", "int", "copies", 1,
          "Copies of the pipeline side by side: data parallel on one wafer (mesh, at most 64), or on "
          "more IPUs (ipu; the batch is split between them).", (1, 1024),
          ("workload.type", ("layer_pipeline", "transformer"))),
    Param("workload", "fuse_elementwise", "bool", "", True,
          "Fold each LayerNorm, GeLU and residual add into its neighbouring matrix kernel's region "
          "(false gives every kernel its own region).", None, _PIPELINE),
    Param("workload", "fuse_attention", "bool", "", True,
          "Run attention's scores, softmax and x V as one kernel, whose PEs keep the sequence's keys and "
          "values, so the scores never cross a link (false: two kernels, and the scores, n_heads x seq_len "
          "elements a token, travel from one to the other as wavelets).", None, _PIPELINE),
    Param("workload", "tokens_per_chunk", "int", "tokens", 1,
          "Tokens that move through the pipeline together (one task per PE per region).",
          (1, 1_048_576), _PIPELINE),
    Param("workload", "chunks_in_flight", "int", "chunks", 4096,
          "Most chunks in a replica's pipeline at once (admitted, not finished); a chunk enters when "
          "the first region has room for it.", (1, 1_048_576), _PIPELINE),
    Param("workload", "weight_streaming", "bool", "", False,
          "Hold one layer at a time on the wafer and stream the weights in layer by layer (for models "
          "whose weights do not fit); the chunks pass through the layer's kernels once per layer.",
          None, _PIPELINE),
    Param("workload", "weight_bandwidth_gbps", "float", "GB/s", 150.0,
          "Bandwidth the weights stream in at (a CS-2's external I/O is 12 x 100 Gb Ethernet, "
          "150 GB/s).", (0.001, 1e9), ("workload.weight_streaming", (True,))),
    Param("workload", "fusion", "str", "", "o1",
          "How operators are fused into sections: o0 one per section, o1 by rules (LayerNorm and "
          "elementwise into their GEMMs), o3 o1's sections merged within machine.section_fill of the PCUs, "
          "with each layer's attention one operator that never writes its scores.", ("o0", "o1", "o3"), _RDU),
    Param("workload", "tile_tokens", "int", "tokens", 64,
          "Tokens per tile streamed through a section; must divide the tokens of a microbatch.",
          (1, 1_048_576), _RDU),
    Param("workload", "parallelism", "str", "", "T1P1D1",
          "Chips as T<tensor>P<pipeline>D<data> degrees, e.g. T4P2D1 on 8 chips.", None, _RDU),
    Param("workload", "layers_per_stage", "ints", "layers", (),
          "Transformer blocks each pipeline stage (the P of workload.parallelism) holds, in order; one "
          "entry per stage, each at least 1, summing to n_layers; empty means as even as can be (the first "
          "n_layers mod P stages one more).", (1, 1024), _RDU),
    Param("workload", "microbatches", "int", "microbatches", 1,
          "Microbatches per data-parallel replica (GPipe schedule over the pipeline stages).",
          (1, 1_048_576), _RDU),
    Param("workload", "prefetch", "bool", "", True,
          "Load the next section's weights into the PMUs the running section leaves free.", None,
          _RDU),
    Param("workload", "layers_per_ipu", "ints", "layers", (),
          "Transformer blocks each IPU of a replica holds, in order (one entry per pipeline stage; they sum "
          "to n_layers; only the first may be 0, putting the embedding alone on IPU 0); empty means one "
          "IPU holding every block.", (0, 1024), _IPU),
    Param("workload", "tensor_parallel", "int", "IPUs", 1,
          "IPUs that hold each pipeline stage together, Megatron style (the matrix operators and "
          "attention split over them, an all-reduce after out_proj and ffn_down); must divide n_heads "
          "(docs/ipu.md, \"Tensor parallelism\").", (1, 1024), _IPU),
    Param("workload", "gradient_accumulation", "int", "micro-batches", 1,
          "Micro-batches per step of each replica; they flow through the pipeline stages one after "
          "another (batch / (replicas x gradient_accumulation) sequences each).", (1, 1_048_576), _IPU),
    Param("workload", "vocab_size", "int", "tokens", 50257,
          "Vocabulary of the token embedding and of the output head (GPT-2: 50,257): rdu, the embedding on "
          "the first pipeline stage and the final norm, head and loss on the last; ipu, the embedding on "
          "IPU 0; mesh layer_pipeline, the embedding's region before the first layer and the head's (final "
          "norm; logits and loss) after the last (not with weight streaming). 0 leaves them out (the blocks "
          "alone).", (0, 10_000_000), _MODEL),
    Param("workload", "recompute", "bool", "", False,
          "Training: keep only each micro-batch's input and recompute a block's activations before its "
          "backward (less memory, more compute).", None, _IPU),
    Param("workload", "pipeline_schedule", "str", "", "interleaved",
          "Training: how a step's pipeline steps are ordered. interleaved: in every pipeline step each stage "
          "runs one micro-batch's forward and an earlier one's backward (Graphcore's pipelining: stage s keeps "
          "at most 2 (n - 1 - s) + 1 micro-batches' activations); grouped: every micro-batch's forward, then "
          "every backward (GPipe: each stage keeps all the step's micro-batches'; docs/ipu.md, \"The pipeline\").",
          ("grouped", "interleaved"), _IPU),
    Param("workload", "trace_file", "str", "", "",
          "Path of a CSV or HDF5 trace of (cycle, row, col, work_cycles) events, relative to the "
          "scenario file.", None, ("workload.type", ("trace",))),
    # [output]
    Param("output", "frame_every_cycles", "int", "cycles", 100,
          "Cycles between full per-PE frames in the result file; 0 writes no frames.",
          (0, 1_000_000_000), _MESH),
    Param("output", "flush_every_cycles", "int", "cycles", 500,
          "Cycles between flushes of the result file (what an interrupted run keeps).",
          (1, 1_000_000), _MESH),
    Param("output", "checkpoint_every_seconds", "float", "s", 0.0,
          "Least wall-clock seconds between checkpoints (each written after a flush), from which a stopped "
          "run resumes (meshsim run --resume); besides, a checkpoint waits 20 times as long as the last one "
          "took to write, so that they take at most 5% of the run. 0: that rule alone (a small grid's "
          "checkpoints follow every flush).", (0.0, 1e9), _RESUMABLE),
    Param("output", "window_busy", "bool", "", True,
          "Write every PE's busy cycles in every window, so that report can recompute window figures "
          "(also at multiples of the window) from the file; false saves the space.", None, _MESH),
    Param("output", "compression_level", "int", "", 1,
          "Gzip level of the result datasets; 0 means uncompressed.", (0, 9)),
    Param("output", "latency_histogram_max_cycles", "int", "cycles", 16384,
          "Size of the latency histogram; latencies at or above it go to an overflow bin.",
          (16, 1_048_576), _MESH),
)

_BY_PATH = {(p.section, p.name): p for p in PARAMS}


def param(section: str, name: str) -> Param:
    """The table entry of `section.name` (docs/design.md, "Scenario files"); KeyError if there is none."""
    try:
        return _BY_PATH[(section, name)]
    except KeyError:
        raise KeyError(f"no scenario key {section}.{name}") from None


def sections() -> tuple[str, ...]:
    """The section names in table order (docs/design.md, "Scenario files")."""
    return tuple(dict.fromkeys(p.section for p in PARAMS))


def section_params(section: str) -> tuple[Param, ...]:
    """The entries of one section in table order."""
    return tuple(p for p in PARAMS if p.section == section)


def format_number(x) -> str:
    """A bound or value as a user would write it in TOML: 16_384, 0.001, 1 (for 1.0)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        # Underscores keep nine-digit bounds readable and are valid TOML integers.
        return f"{x:_}" if abs(x) >= 1_000_000 else str(x)
    return f"{x:g}"


def format_range(p: Param) -> str:
    """The inclusive range of a numeric key as "[lo, hi]", or "" when it has none."""
    if p.range is None:
        return ""
    lo, hi = p.range
    return f"[{format_number(lo)}, {format_number(hi)}]"


def format_choices(values) -> str:
    """Allowed strings as a TOML-quoted list: "a", "b", "c"."""
    return ", ".join(f'"{v}"' for v in values)


def format_condition(condition: tuple[str, tuple]) -> str:
    """An applies_when condition in words: workload.type is "uniform", "hotspot" or "skewed"."""
    key, values = condition
    quoted = [format_number(v) if isinstance(v, bool) else f'"{v}"' for v in values]
    if len(quoted) == 1:
        return f"{key} is {quoted[0]}"
    return f"{key} is {', '.join(quoted[:-1])} or {quoted[-1]}"

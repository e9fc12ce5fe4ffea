"""The ipu's own scenario keys and presets: its rows of the parameter table (meshsim.params composes
every machine's rows with the shared ones), in table order, and the chips whose figures
machine.preset fills them with.

docs/ipu.md gives their semantics and the presets' sources; the parameter reference
(docs/parameters.md) is generated from them.
"""

from __future__ import annotations

from ..params import Param

#: The GC200 on a roofline: 250 TFLOP/s (16-bit) and 47.5 TB/s of in-processor memory bandwidth
#: (Graphcore IPU-M2000 and GC200 product brief, 2020).
GC200_PEAK_FLOPS = 250e12
GC200_SRAM_BYTES_PER_SECOND = 47.5e12

_IPU = ("machine.type", ("ipu",))

#: IPU presets (docs/ipu.md, "Presets and their sources"). macs_per_cycle makes tiles x MACs x 2 x
#: clock the published 16-bit peak (GC200 250, Bow 350, GC2 124.5 TFLOP/s); fp32_rate the published
#: fp32 peak over it (62.5 of 250, 87.5 of 350, 31.1 of 124.5).
PRESETS = {
    "gc200": dict(tiles=1472, tile_sram_kib=624, clock_ghz=1.33, macs_per_cycle=64, worker_threads=6,
                  exchange_bytes_per_cycle=4, ipu_link_gbps=320.0, streaming_memory_gbps=20.0, fp32_rate=0.25),
    "bow": dict(tiles=1472, tile_sram_kib=624, clock_ghz=1.85, macs_per_cycle=64, worker_threads=6,
                exchange_bytes_per_cycle=4, ipu_link_gbps=320.0, streaming_memory_gbps=20.0, fp32_rate=0.25),
    "gc2": dict(tiles=1216, tile_sram_kib=256, clock_ghz=1.6, macs_per_cycle=32, worker_threads=6,
                exchange_bytes_per_cycle=4, ipu_link_gbps=320.0, streaming_memory_gbps=20.0, fp32_rate=0.25),
}

#: The preset a scenario that names none gets.
DEFAULT_PRESET = "gc200"

#: Keys the ipu once had under other names: old -> new. A scenario may still use the old name, with a
#: warning (meshsim.scenario); one concept has one key across machines.
ALIASES = {"workload.gradient_accumulation": "workload.microbatches",
           "workload.layers_per_ipu": "workload.layers_per_stage"}

# The ipu keys' defaults are the default preset's (gc200).
_GC200 = PRESETS["gc200"]

PARAMS: tuple[Param, ...] = (
    Param("run", "steps", "int", "steps", 1,
          "Training (or inference) steps an ipu run simulates, one after another.", (1, 1_000_000), _IPU),
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
    Param("workload", "tensor_parallel", "int", "IPUs", 1,
          "IPUs that hold each pipeline stage together, Megatron style (the matrix operators and "
          "attention split over them, an all-reduce after out_proj and ffn_down); must divide n_heads "
          "(docs/ipu.md, \"Tensor parallelism\").", (1, 1024), _IPU),
    Param("workload", "recompute", "bool", "", False,
          "Training: keep only each micro-batch's input and recompute a block's activations before its "
          "backward (less memory, more compute).", None, _IPU),
    Param("workload", "pipeline_schedule", "str", "", "interleaved",
          "Training: how a step's pipeline steps are ordered. interleaved: in every pipeline step each stage "
          "runs one micro-batch's forward and an earlier one's backward (Graphcore's pipelining: stage s keeps "
          "at most 2 (n - 1 - s) + 1 micro-batches' activations); grouped: every micro-batch's forward, then "
          "every backward (GPipe: each stage keeps all the step's micro-batches'; docs/ipu.md, \"The pipeline\").",
          ("grouped", "interleaved"), _IPU),
)

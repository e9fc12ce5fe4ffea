"""The mesh's own scenario keys and figures: its rows of the parameter table (meshsim.params composes
every machine's rows with the shared ones), in table order.

docs/mesh.md gives their semantics; the parameter reference (docs/parameters.md) is
generated from them.
"""

from __future__ import annotations

from ..params import BERNOULLI_WORKLOADS, Param
from . import policies

#: The largest grid the mesh accepts, in PEs (room for the whole WSE-2 fabric, 757 x 996, and more).
MAX_MESH_PES = 4_194_304

#: WSE-2: a PE's SIMD units do 4 16-bit multiply-adds a cycle, 8 FLOPs (850,000 PEs at 1.1 GHz: 7.5 PFLOP/s).
WSE2_PE_FLOPS_PER_CYCLE = 8.0

#: The WSE-2 on a roofline: 7.5 PFLOP/s (16-bit) over about 850,000 PEs, and 20 PB/s of on-chip
#: memory bandwidth (Cerebras, "Cerebras Systems: Achieving Industry Best AI Performance Through A
#: Systems Approach", 2021, and the CS-2 product brief). Its weights live in the PEs' SRAM, so SRAM
#: bandwidth is the roof.
WSE2_PEAK_FLOPS = 7.5e15
WSE2_SRAM_BYTES_PER_SECOND = 20e15

_MESH = ("machine.type", ("mesh",))
_BERNOULLI = ("workload.type", BERNOULLI_WORKLOADS)
_TRAFFIC = ("workload.type", ("traffic",))
_PIPELINE = ("workload.type", ("layer_pipeline",))
_PIPELINE_DECODE = ("workload.type", ("layer_pipeline", "decode"))
_DECODE = ("workload.type", ("decode",))

#: machine.decode_phase_cycles as fitted to WaferLLM's decode measurements (docs/decode.md,
#: "Calibration"; `meshsim calibrate`).
DECODE_PHASE_CYCLES = 252

#: Mesh presets (docs/mesh.md, "Presets"): the wafers whose figures machine.preset fills the keys with;
#: the keys' defaults are the WSE-2's. WSE-3 (Cerebras, 2024): 900,000 cores and 44 GB of on-chip SRAM,
#: about 48 KiB a core as on the WSE-2; 762 x 1,172 of its fabric usable in hardware builds (WaferLLM's
#: WSE-3 kernels); its clock and a core's multiply-adds a cycle are taken as the WSE-2's (assumptions).
PRESETS: dict = {
    "wse2": dict(rows=757, cols=996, sram_kib=48, clock_ghz=1.1, pe_flops_per_cycle=WSE2_PE_FLOPS_PER_CYCLE),
    "wse3": dict(rows=762, cols=1172, sram_kib=48, clock_ghz=1.1, pe_flops_per_cycle=WSE2_PE_FLOPS_PER_CYCLE),
}
DEFAULT_PRESET = "wse2"

PARAMS: tuple[Param, ...] = (
    Param("run", "cycles", "int", "cycles", 1000,
          "Number of cycles to simulate (per-PE counters are 32-bit, which bounds a run); an rdu "
          "run simulates one step, however many cycles it takes, an ipu run run.steps steps.",
          (1, 100_000_000), _MESH),
    Param("run", "window_cycles", "int", "cycles", 100,
          "Length of the windows over which LI is computed (an rdu run computes it per section).",
          (1, 1_000_000_000), _MESH),
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
    Param("machine", "pe_flops_per_cycle", "float", "FLOPs/cycle", WSE2_PE_FLOPS_PER_CYCLE,
          "Peak 16-bit FLOPs of one PE per cycle, its SIMD width (WSE-2: 4 fp16 multiply-adds, 8 FLOPs; "
          "850,000 PEs at 1.1 GHz are 7.5 PFLOP/s); fp32 at machine.fp32_rate of it.",
          (0.001, 1e6), _PIPELINE_DECODE),
    Param("machine", "sram_read_bytes_per_cycle", "int", "bytes/cycle", 16,
          "Bytes a PE's SRAM ports read per cycle for its arithmetic (WSE-2: two 64-bit reads); a PE's rate "
          "for an operator is bounded by the operands it must read (docs/mesh.md, \"The PE and the wavelets\").",
          (1, 4096), _PIPELINE),
    Param("machine", "sram_write_bytes_per_cycle", "int", "bytes/cycle", 8,
          "Bytes a PE's SRAM ports write per cycle (WSE-2: one 64-bit write).", (1, 4096), _PIPELINE),
    Param("machine", "wavelet_bytes", "int", "bytes", 4,
          "Bytes of one wavelet, the message a link carries (WSE-2: 32 bits): a token's activation "
          "vector crosses a link as its bytes over this many messages.", (1, 4096), _PIPELINE),
    Param("machine", "sram_kib", "int", "KiB", 48,
          "SRAM of each PE, which must hold the weights of its region's kernel (48 KiB on the WSE-2); decode: "
          "every layer's weight blocks and the key-value cache's share.",
          (1, 1_048_576), _PIPELINE_DECODE),
    Param("machine", "decode_add_cycles", "int", "cycles", 1,
          "decode: cycles from a wavelet's arrival at a PE to its sum's leaving it, in a collective's chain "
          "(docs/decode.md).", (0, 64), _DECODE),
    Param("machine", "route_budget", "int", "routes", 24,
          "decode: routes (colours) a PE's router can tell apart, 24 on the WSE-2; the collectives of a "
          "K-level tree need 8 K + 5, and a level left without routes is relayed through the PEs between its "
          "members, at a set-up and an add's cycles each (docs/decode.md, \"Routes and relays\").",
          (13, 4096), _DECODE),
    Param("machine", "decode_phase_cycles", "int", "cycles", DECODE_PHASE_CYCLES,
          "decode: cycles from a PE's being ready for a phase of a collective to its first wavelet (its task "
          "and DSDs set up); fitted to WaferLLM's LLaMA3-8B measurements (docs/decode.md, \"Calibration\").",
          (0, 100_000), _DECODE),
    Param("workload", "output_tokens", "int", "tokens", 128,
          "decode: tokens to generate, one after another (mesh, ipu and rdu).", (1, 1_048_576), _DECODE),
    Param("workload", "kv_policy", "str", "", "shift",
          "decode: how the key-value cache's rows take new tokens: shift (the new token enters the last row "
          "and rows pass their oldest entries to the row above to stay within a token of each other, "
          "WaferLLM's) or append (the new tokens stay in the last row, as a paged cache's tail does).",
          ("shift", "append"), _DECODE),
    Param("workload", "prefill_region", "int", "PEs", 0,
          "decode: side of the square region the prompt's prefill runs on before the first token (WaferLLM "
          "prefills on a larger region than it decodes on); 0: the decode region's (docs/decode.md, \"Prefill "
          "and the time to first token\").", (0, 4096), _DECODE),
    Param("workload", "decode_regions", "int", "regions", 1,
          "decode: regions of machine.rows x machine.cols PEs the layers are split over, a token running them "
          "one after another (a model whose weights do not fit one region); 0: the fewest that hold the model "
          "(docs/decode.md, \"A model over several regions\").", (0, 4096), _DECODE),
    Param("workload", "decode_group", "int", "PEs", 0,
          "decode: members of a group at each level of the collectives' tree but the top one; 0: the whole "
          "number nearest machine.rows ** (1 / workload.decode_tree_levels), sqrt(machine.rows) for two "
          "levels.", (0, 4096), _DECODE),
    Param("workload", "decode_tree_levels", "int", "levels", 2,
          "decode: levels of the collectives' K-tree (WaferLLM's K; 2, its choice): the line's PEs reduce in "
          "groups, the groups' roots in groups, and so on, the top level's members in one chain "
          "(docs/decode.md, \"A collective on a line\").", (1, 8), _DECODE),
    Param("migration", "policy", "str", "", "least_loaded", policies.description(), policies.names(), _MESH),
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
    Param("workload", "accumulate", "str", "", "fp32",
          "Precision of a matrix kernel's partial sums: same (the model's precision) or fp32 (16-bit "
          "multiplies with fp32 additions, the WSE's mixed-precision multiply-add; the Model Zoo's "
          "mixed_precision: docs/mesh.md, \"The PE and the wavelets\").", ("same", "fp32"), _PIPELINE),
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
    Param("workload", "trace_file", "str", "", "",
          "Path of a CSV or HDF5 trace of (cycle, row, col, work_cycles) events, relative to the "
          "scenario file.", None, ("workload.type", ("trace",))),
    Param("output", "frame_every_cycles", "int", "cycles", 100,
          "Cycles between full per-PE frames in the result file; 0 writes no frames.",
          (0, 1_000_000_000), _MESH),
    Param("output", "flush_every_cycles", "int", "cycles", 500,
          "Cycles between flushes of the result file (what an interrupted run keeps).",
          (1, 1_000_000), _MESH),
    Param("output", "window_busy", "bool", "", True,
          "Write every PE's busy cycles in every window, so that report can recompute window figures "
          "(also at multiples of the window) from the file; false saves the space.", None, _MESH),
    Param("output", "latency_histogram_max_cycles", "int", "cycles", 16384,
          "Size of the latency histogram; latencies at or above it go to an overflow bin.",
          (16, 1_048_576), _MESH),
)

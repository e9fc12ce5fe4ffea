"""The one parameter table: each scenario key's type, unit, default, allowed values and meaning.

docs/design.md, "Scenario files". Validation and defaults (`meshsim.scenario`) and the parameter
reference (docs/parameters.md, `meshsim.docs`) are all generated from `PARAMS`; a key that is not in this table does
not exist. This module holds the rows every machine reads, or several do (`SHARED`); each machine
declares its own rows and presets in its package (its Machine's `params`, `presets` and
`default_preset`: meshsim/mesh/keys.py, meshsim/rdu/keys.py, meshsim/ipu/keys.py), and `PARAMS`
composes them with these from the registry (meshsim.machine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import InputError
from .machine import names as machine_names

#: The value types a parameter may have. "regions" is a list of [row0, col0, row1, col1] integer
#: lists: half-open rectangles of PEs, rows row0..row1-1 and columns col0..col1-1; "ints" a list of
#: integers, each in the key's allowed range.
TYPES = ("int", "float", "str", "bool", "regions", "ints")

#: Keys of the mesh's decode workload (docs/decode.md) that the ipu's and the rdu's generations do not use:
#: their conditions name the workload type alone, so those machines refuse them by name.
MESH_DECODE_KEYS = ("workload.kv_policy", "workload.decode_group", "workload.prefill_region", "workload.decode_regions",
                    "workload.decode_tree_levels", "machine.route_budget", "machine.decode_add_cycles",
                    "machine.decode_phase_cycles", "machine.pe_flops_per_cycle", "machine.sram_kib")


def refuse_mesh_decode_keys(ok, get, add) -> None:
    """A mesh decode key (MESH_DECODE_KEYS) set to other than its default on another machine's generation:
    refused by name, through a machine's check_scenario `ok`, `get` and `add`."""
    for key in MESH_DECODE_KEYS:
        if ok(key) and get(key) != param(*key.split(".")).default_value():
            add(key, ["machine.type"], "applies only when machine.type is \"mesh\" (the mesh's decode); this "
                                       "machine's generation does not use it")


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


_MODEL = ("workload.type", ("layer_pipeline", "transformer", "decode"))
_RDU_IPU = ("machine.type", ("rdu", "ipu"))

#: The rows every machine reads, or several do; each machine's own rows are its package's (the
#: `params` of its Machine, from its keys module), composed with these into PARAMS below.
SHARED: tuple[Param, ...] = (
    Param("run", "name", "str", "", "",
          "Name of the run, used for the default result file name; empty means the scenario "
          "file's stem."),
    Param("run", "seed", "int", "", 1,
          "Seed of every random draw; the same seed gives bit-identical results.", (0, 2**63 - 1)),
    Param("run", "threads", "int", "threads", 0,
          "Worker threads; 0 means one per 32,768 PEs (what a shared host rewards; docs/mesh.md, \"Threads\"), "
          "up to the cores the process may run on, and one for the rdu and the ipu, whose kernels are serial. "
          "Results do not depend on it.",
          (0, 1024)),
    Param("machine", "type", "str", "", "mesh",
          "The machine model: mesh is a WSE-2-style 2D mesh of PEs, rdu a SambaNova-style "
          "reconfigurable dataflow chip (docs/rdu.md), ipu Graphcore-style bulk-synchronous tiles "
          "(docs/ipu.md).", machine_names),
    Param("machine", "clock_ghz", "float", "GHz", 1.1,
          "Clock frequency; the mesh uses it only to convert cycles to seconds in reports; for rdu "
          "and ipu the preset sets it (see docs/rdu.md, docs/ipu.md) unless the scenario does.",
          (0.001, 100.0)),
    Param("machine", "fp32_rate", "float", "", 0.5,
          "Compute rate at fp32, and at tf32 (which none of these machines has units for, so it computes "
          "as fp32), as a fraction of the 16-bit peak (WSE-2: 2 fp32 FMACs per PE-cycle against 4 at fp16, "
          "0.5; presets: SN10 and SN30 0.5, an assumption; GC200, Bow and GC2 0.25, their published fp32 "
          "peaks). fp8 computes at the 16-bit rate.", (0.001, 1.0), _MODEL),
    # machine.preset: composed from the machines that have presets (preset_row below)
    Param("machine", "preset_file", "str", "", "",
          "A TOML file whose [machine] table fills the machine keys the scenario does not set, over "
          "machine.preset: the values `meshsim calibrate` fits (relative to the scenario file; docs/design.md, "
          "\"Calibration\"). Empty: none."),
    Param("machine", "host_seconds", "float", "s", 0.0,
          "The host's part of every step, outside the chip: input feeding, step launch, the framework's own "
          "work. Reported apart (host_seconds) and added to the chip's time in step_seconds and "
          "samples_per_second (rdu preset: fitted to the SN30's end-to-end rates, docs/rdu.md, "
          "\"Calibration\"; ipu and the mesh's layer pipeline: 0, not measured).", (0.0, 1e6), _MODEL),
    Param("workload", "type", "str", "", "uniform",
          "Where tasks come from: Bernoulli injection with a uniform, hotspot or lognormal-skewed "
          "rate map, or events read from a trace file; traffic offers routed packets instead "
          "(network studies); layer_pipeline runs a transformer's kernels as a pipeline of regions; "
          "transformer is the rdu's and the ipu's workload (a model compiled into sections, or "
          "mapped onto tiles); decode generates tokens one by one with a key-value cache, on a square region "
          "of the mesh (docs/decode.md), sharded over IPUs or on SN40L sockets (docs/ipu.md and docs/rdu.md, "
          "\"Generation\").",
          ("uniform", "hotspot", "skewed", "trace", "traffic", "layer_pipeline", "transformer", "decode")),
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
          "The feed-forward block: gelu (up, GeLU, down: GPT-2, Falcon, GPT-NeoX), relu (the same with ReLU: "
          "OPT), gated (gate and up projections, SiLU(gate) x up, down: the SwiGLU of Llama, Mistral, Qwen2, "
          "Phi-3) or geglu (GeLU(gate) x up: Gemma).", ("gelu", "relu", "gated", "geglu"), _MODEL),
    Param("workload", "bias", "bool", "", True,
          "Every projection carries biases (GPT-2, OPT, GPT-NeoX: true; Llama, Mistral, Qwen2, Phi-3, Gemma, "
          "Falcon: false).", None, _MODEL),
    Param("workload", "qkv_bias", "bool", "", False,
          "The query, key and value projections carry biases, the others not (Qwen2); bias = true gives "
          "every projection biases whatever this says.", None, _MODEL),
    Param("workload", "head_dim", "int", "elements", 0,
          "Elements of an attention head; 0 means hidden_size / n_heads (then hidden_size must be a multiple "
          "of n_heads). Gemma 7B: 16 heads of 256 over a hidden size of 3,072.", (0, 65536), _MODEL),
    Param("workload", "norm", "str", "", "layernorm",
          "The norms: layernorm (a scale and a shift, 2 x hidden_size parameters, 8 FLOPs an element: GPT-2, "
          "OPT, Falcon, GPT-NeoX) or rmsnorm (a scale, 4 FLOPs an element: Llama, Mistral, Qwen2, Phi-3, "
          "Gemma).", ("layernorm", "rmsnorm"), _MODEL),
    Param("workload", "shared_norm", "bool", "", False,
          "One norm a block, read by attention and the MLP side by side (Falcon's parallel attention); "
          "false: two.", None, _MODEL),
    Param("workload", "positions", "str", "", "learned",
          "Position encoding: learned (a table of max_positions rows added to the token's row: GPT-2, OPT), "
          "rotary (Llama and most others) or alibi; only a learned table has parameters.",
          ("learned", "rotary", "alibi"), _MODEL),
    Param("workload", "max_positions", "int", "tokens", 0,
          "Rows of the learned position table (GPT-2's n_positions; OPT's max_position_embeddings + 2); 0 "
          "means seq_len.", (0, 1_048_576), _MODEL),
    Param("workload", "tied_head", "bool", "", True,
          "The output head is the token table itself (GPT-2, OPT, Falcon, Gemma, small Qwen2); false: a table "
          "of its own, vocab_size x hidden_size more parameters (Llama, Mistral, Phi-3, GPT-NeoX).", None,
          _MODEL),
    Param("workload", "token_types", "int", "rows", 0,
          "Rows of a token-type (segment) table whose row is added to each token's at the embedding (BERT's "
          "type_vocab_size, 2); 0: none.", (0, 1_048_576), _MODEL),
    Param("workload", "pooler", "bool", "", False,
          "A pooler after the last block: a dense layer of hidden_size x hidden_size + hidden_size on each "
          "sequence's first token (BERT).", None, _MODEL),
    Param("workload", "context", "int", "tokens", 0,
          "Tokens already in each sequence's key-value cache: the step's seq_len new tokens attend to them "
          "besides themselves, the cached keys and values read from memory (a decode step: seq_len = 1, "
          "context = the tokens so far); 0: no cache, a prefill or training step. `meshsim roofline` shows "
          "such a step's operators. The decode workload: the prompt, the tokens cached before the first "
          "decoded one (on the ipu and the rdu at least 1: the prompt gives the first output token).",
          (0, 1_048_576), _MODEL),
    Param("workload", "model_config", "str", "", "",
          "Path of a Hugging Face config.json (relative to the scenario file) that fills the model's "
          "shape: the keys of the model that the scenario does not set (docs/design.md, \"Models from a "
          "config.json\"); empty: none.", None, _MODEL),
    Param("workload", "precision", "str", "", "bf16",
          "Element type of weights and activations, and the compute rate: fp32 and tf32 (a 4-byte fp32 "
          "value these machines compute as fp32) at machine.fp32_rate of the 16-bit peak, bf16, fp16 and "
          "fp8 at the peak.", ("fp32", "tf32", "bf16", "fp16", "fp8"), _MODEL),
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
    Param("workload", "vocab_size", "int", "tokens", 50257,
          "Vocabulary of the token embedding and of the output head (GPT-2: 50,257): rdu, the embedding on "
          "the first pipeline stage and the final norm, head and loss on the last; ipu, the embedding on "
          "IPU 0; mesh layer_pipeline, the embedding's region before the first layer and the head's (final "
          "norm; logits and loss) after the last (not with weight streaming). 0 leaves them out (the blocks "
          "alone).", (0, 10_000_000), _MODEL),
    Param("workload", "layers_per_stage", "ints", "layers", (),
          "Transformer blocks each pipeline stage holds, in order: one entry per stage, summing to "
          "n_layers. rdu: the stages are the P of workload.parallelism, each entry at least 1; empty means as "
          "even as can be (the first n_layers mod P stages one more). ipu: a stage is an IPU of a replica, and "
          "only the first entry may be 0 (the embedding alone on IPU 0); empty means one IPU holding every "
          "block.", (0, 1024), _RDU_IPU),
    Param("workload", "microbatches", "int", "micro-batches", 1,
          "Micro-batches per step of each data-parallel replica, one after another through the pipeline "
          "stages (batch / (data-parallel replicas x microbatches) sequences each): rdu, a GPipe schedule; "
          "ipu, gradient accumulation.", (1, 1_048_576), _RDU_IPU),
    Param("output", "compression_level", "int", "", 1,
          "Gzip level of the result datasets; 0 means uncompressed.", (0, 9)),
)

#: The sections, in the order the table (and a resolved scenario) lists them.
SECTIONS = ("run", "machine", "migration", "workload", "output")


def preset_row(presets: dict) -> Param:
    """machine.preset, for the machines that have presets (`presets`: machine name -> (its preset
    names, the one a scenario that names none gets)), in registry order."""
    names = [n for ps, _ in presets.values() for n in ps]
    def either(ps):
        return ps[0] if len(ps) == 1 else f"{', '.join(ps[:-1])} or {ps[-1]}"

    said = "; ".join(f"{either(ps)} for {m} (when not set, {d})" for m, (ps, d) in presets.items())
    first = next(iter(presets.values()), ((), ""))[1]
    return Param("machine", "preset", "str", "", first,
                 f"Chip whose published figures fill the machine keys the scenario does not set: {said} "
                 "(each machine's doc gives its presets' sources).", tuple(names),
                 ("machine.type", tuple(presets)))


def checkpoint_row(resumable: tuple) -> Param:
    """output.checkpoint_every_seconds, for the machines whose runs resume (`resumable`: their names)."""
    return Param("output", "checkpoint_every_seconds", "float", "s", 0.0,
                 "Wall-clock seconds between checkpoints, from which a stopped run resumes (meshsim run --resume); "
                 "each is written after a flush, the first after the run's first flush whatever this says. 0: the "
                 "others when checkpoints take at most 5% of the run (each waits 20 times as long as the last took "
                 "to write: a small grid's follow every flush, the full wafer's come every 20 s or so). More than "
                 "0: one at the first flush that many seconds after the last, whatever it costs (0.001: one at "
                 "every flush).", (0.0, 1e9), ("machine.type", resumable))


def presets_of(machine_type: str) -> tuple[dict, str]:
    """(the presets of machine `machine_type`, name -> {key: value}; the one a scenario that names
    none gets), ({}, "") for a machine without presets."""
    from . import machine

    m = machine.get(machine_type)
    return dict(m.presets), m.default_preset


def compose(machines) -> tuple[Param, ...]:
    """The whole table: the shared rows and each machine's own (`machines`, in registry order), a
    section at a time; machine.preset is made from the machines' presets. Two rows for one key
    are an error of the machine that adds the second."""
    rows = list(SHARED)
    presets = {m.name: (tuple(m.presets), m.default_preset) for m in machines if m.presets}
    if presets:
        rows.append(preset_row(presets))
    resumable = tuple(m.name for m in machines if m.resumable)
    if resumable:
        rows.append(checkpoint_row(resumable))
    seen = {(p.section, p.name): "meshsim" for p in rows}
    for m in machines:
        for p in m.params:
            if (p.section, p.name) in seen:
                raise InputError(f"machine {m.name!r}: {p.path} is already a key of {seen[(p.section, p.name)]}")
            if p.section not in SECTIONS:
                raise InputError(f"machine {m.name!r}: {p.path}: the sections are {', '.join(SECTIONS)}")
            seen[(p.section, p.name)] = f"machine {m.name!r}"
            rows.append(p)
    return tuple(sorted(rows, key=lambda p: SECTIONS.index(p.section)))  # stable: in order within a section


class ParamTable(Sequence):
    """PARAMS: the table composed from the shared rows and every machine's (meshsim.machine's
    registry: the built-in machines, those registered since and those installed packages declare),
    composed again when the registry changes."""

    def __init__(self):
        self._key = None
        self._machines: tuple = ()
        self._rows: tuple = ()
        self._by_path: dict = {}

    def rows(self) -> tuple[Param, ...]:
        from . import machine

        if machine.registry_key() != self._key:
            self._machines = machine.all_machines()
            self._rows = compose(self._machines)
            self._by_path = {(p.section, p.name): p for p in self._rows}
            self._key = machine.registry_key()
        return self._rows

    def machines(self) -> tuple:
        """The machines the table was composed from (every one that could be loaded)."""
        self.rows()
        return self._machines

    def by_path(self) -> dict:
        self.rows()
        return self._by_path

    def __getitem__(self, i):
        return self.rows()[i]

    def __len__(self) -> int:
        return len(self.rows())

    def __iter__(self):
        return iter(self.rows())


PARAMS = ParamTable()


def aliases() -> dict:
    """Old key names every machine keeps for its keys, "section.old" -> "section.new"."""
    out = {}
    for m in PARAMS.machines():
        out.update(m.aliases)
    return out


def param(section: str, name: str) -> Param:
    """The table entry of `section.name` (docs/design.md, "Scenario files"); KeyError if there is none."""
    try:
        return PARAMS.by_path()[(section, name)]
    except KeyError:
        raise KeyError(f"no scenario key {section}.{name}") from None


def sections() -> tuple[str, ...]:
    """The section names in table order (docs/design.md, "Scenario files")."""
    return SECTIONS


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

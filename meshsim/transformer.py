"""A decoder-only (GPT-style) transformer as a list of operators with FLOPs and bytes.

One copy of these formulas serves every machine model: the mesh's `layer_pipeline` workload
(docs/mesh.md, "Dataflow": PEs per kernel in proportion to FLOPs), the RDU's operator graph
(docs/rdu.md, "Compilation": PCUs in proportion to FLOPs, bytes over DDR) and the IPU's layers per
pipeline stage (docs/ipu.md, "Mapping"). Arithmetic intensity is the roofline's FLOPs / bytes moved
(docs/design.md, "Metrics").

All counts are exact Python integers: FLOPs count a multiply and an add as two, bytes are elements
times the element size of the model's precision. The embedding, the final norm and the output head
are outside the transformer blocks: `edge_operators` and `edge_parameter_count` count them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from fractions import Fraction

from .errors import InputError

PRECISION_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of activations and weights, by precision name."""

#: Precisions that compute at the machine's fp32 rate (`machine.fp32_rate` of the 16-bit peak): fp32,
#: and tf32, a 4-byte fp32 value that only tensor cores these machines lack compute faster. 16- and
#: 8-bit precisions compute at the 16-bit peak (none of the machines has fp8 units).
FP32_COMPUTE = ("fp32", "tf32")

OPERATOR_KINDS = ("gemm", "attention", "elementwise", "norm")
PHASES = ("forward", "backward")

# FLOPs per element of LayerNorm over mean, variance, normalise, scale and shift: a round count of 8,
# not an instruction count, so the machines agree on one figure.
NORM_FLOPS_PER_ELEMENT = 8
# FLOPs per element of RMSNorm x / sqrt(mean(x^2) + eps) x scale: square, sum, normalise, scale.
RMSNORM_FLOPS_PER_ELEMENT = 4
#: The norms: "layernorm" (a scale and a shift, 2H parameters: GPT-2, OPT, Falcon, GPT-NeoX) or
#: "rmsnorm" (a scale, H parameters: Llama, Mistral, Qwen2, Phi-3, Gemma), by (FLOPs per element,
#: parameters per element of the hidden size).
NORMS = {"layernorm": (NORM_FLOPS_PER_ELEMENT, 2), "rmsnorm": (RMSNORM_FLOPS_PER_ELEMENT, 1)}
#: Position encodings: "learned" adds a row of a table of max_positions rows (GPT-2, OPT); "rotary"
#: (Llama and the others) and "alibi" have no table (their few FLOPs an element are not counted).
POSITIONS = ("learned", "rotary", "alibi")
# FLOPs per element of GeLU in its tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
# cube, multiply, add, multiply, tanh, add, multiply, multiply.
GELU_FLOPS_PER_ELEMENT = 8
# FLOPs per attention score for softmax(Q K^T / sqrt(d)): scale, running max, exp, sum, divide.
SOFTMAX_FLOPS_PER_SCORE = 5
# FLOPs per element of a gated MLP's activation SiLU(gate) x up = gate / (1 + exp(-gate)) x up: negate,
# exp, add, divide, multiply.
GATED_FLOPS_PER_ELEMENT = 5
# FLOPs per element of ReLU, max(x, 0): one comparison.
RELU_FLOPS_PER_ELEMENT = 1
# FLOPs per element of GeGLU, GeLU(gate) x up: GeLU's 8 and the multiply.
GEGLU_FLOPS_PER_ELEMENT = GELU_FLOPS_PER_ELEMENT + 1

#: The feed-forward blocks: "gelu", up, GeLU, down (GPT-2, Falcon, GPT-NeoX); "relu", up, ReLU, down
#: (OPT); "gated", gate and up projections side by side, SiLU(gate) x up, down (the SwiGLU of Llama,
#: Mistral, Qwen2, Phi-3); "geglu", the same with GeLU(gate) x up (Gemma).
MLP_KINDS = ("gelu", "relu", "gated", "geglu")
#: The name of the MLP's activation operator, by MLP kind: the activation the model really computes
#: ("layer<i>.swiglu" for Llama's SiLU(gate) x up). LAYER_OPERATORS names its slot "gelu".
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gated": "swiglu", "geglu": "geglu"}
#: Per MLP kind: (projections side by side in the up GEMM, FLOPs per element of its activation).
MLP_SHAPES = {"gelu": (1, GELU_FLOPS_PER_ELEMENT), "relu": (1, RELU_FLOPS_PER_ELEMENT),
              "gated": (2, GATED_FLOPS_PER_ELEMENT), "geglu": (2, GEGLU_FLOPS_PER_ELEMENT)}

# Backward FLOPs as a multiple of forward FLOPs, by operator kind (see `operators`).
BACKWARD_FLOPS_FACTOR = {"gemm": 2, "attention": 2, "elementwise": 1, "norm": 1}

# The operators of one transformer block, in execution order.
LAYER_OPERATORS = (
    "ln1",
    "qkv_proj",
    "attn_scores_softmax",
    "attn_v",
    "out_proj",
    "residual1",
    "ln2",
    "ffn_up",
    "gelu",
    "ffn_down",
    "residual2",
)


@dataclass(frozen=True)
class Model:
    """The shape of a decoder-only transformer (docs/design.md, "Purpose": the same model on all machines).

    hidden_size: H, elements per token; n_layers: transformer blocks; n_heads: A, attention heads;
    seq_len: S, tokens per sequence; batch: B, sequences per step; ffn_multiplier: F / H, the
    feed-forward width as a multiple of H; precision: a key of PRECISION_BYTES, the element type of
    activations and weights; n_kv_heads: heads of keys and values (grouped-query attention: A /
    n_kv_heads query heads share each; 0 means A, multi-head attention); ffn_width: F in elements when
    it is not a multiple of H (0 means ffn_multiplier x H); mlp: one of MLP_KINDS; bias: whether every
    projection carries biases; head_dim: elements of a head (0 means H / A, which H must then be a
    multiple of; Gemma 7B's 16 heads of 256 make 4,096 against H = 3,072); norm: a key of NORMS;
    qkv_bias: biases on the query, key and value projections alone (Qwen2); shared_norm: one norm a
    block, read by attention and the MLP side by side (Falcon's parallel attention), else two;
    positions: one of POSITIONS; max_positions: rows of a learned position table (0 means seq_len);
    tied_head: the output head is the token table itself (GPT-2, OPT, Falcon, Gemma), else a table of
    its own; token_types: rows of a token-type (segment) table whose row is added to each token's at
    the embedding (BERT's type_vocab_size, 2); pooler: a pooler after the last block, a dense layer
    of H x H + H on each sequence's first token (BERT); context: tokens already in each sequence's
    key-value cache, which the step's seq_len new tokens attend to besides themselves (a decode step is
    seq_len 1; 0: no cache, a prefill or training step). Checked on construction: a bad model raises
    InputError listing every problem.
    """

    hidden_size: int
    n_layers: int
    n_heads: int
    seq_len: int
    batch: int
    ffn_multiplier: int = 4
    precision: str = "bf16"
    n_kv_heads: int = 0
    ffn_width: int = 0
    mlp: str = "gelu"
    bias: bool = True
    head_dim: int = 0
    norm: str = "layernorm"
    qkv_bias: bool = False
    shared_norm: bool = False
    positions: str = "learned"
    max_positions: int = 0
    tied_head: bool = True
    token_types: int = 0
    pooler: bool = False
    context: int = 0

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise InputError with one line per problem (field, value, what is allowed); else return None."""
        problems = []
        for f in fields(self):
            if f.name in ("precision", "mlp", "norm", "positions") or f.name in _SWITCHES:
                continue
            value = getattr(self, f.name)
            least = 0 if f.name in ("n_kv_heads", "ffn_width", "head_dim", "max_positions", "token_types", "context") \
                else 1
            # bool is an int subclass, but True as a hidden size is a mistake, not a 1.
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                problems.append(f"model.{f.name} = {value!r}: must be an integer >= {least}")
        if not isinstance(self.precision, str) or self.precision not in PRECISION_BYTES:
            allowed = ", ".join(sorted(PRECISION_BYTES))
            problems.append(f"model.precision = {self.precision!r}: must be one of {allowed}")
        if not isinstance(self.mlp, str) or self.mlp not in MLP_KINDS:
            problems.append(f"model.mlp = {self.mlp!r}: must be one of {', '.join(MLP_KINDS)}")
        if not isinstance(self.norm, str) or self.norm not in NORMS:
            problems.append(f"model.norm = {self.norm!r}: must be one of {', '.join(NORMS)}")
        if not isinstance(self.positions, str) or self.positions not in POSITIONS:
            problems.append(f"model.positions = {self.positions!r}: must be one of {', '.join(POSITIONS)}")
        for name in _SWITCHES:
            if not isinstance(getattr(self, name), bool):
                problems.append(f"model.{name} = {getattr(self, name)!r}: must be true or false")
        h, a, kv = self.hidden_size, self.n_heads, self.n_kv_heads

        def whole(v, least=1):  # the relations below are judged only between valid fields
            return isinstance(v, int) and not isinstance(v, bool) and v >= least

        if whole(h) and whole(a) and self.head_dim == 0 and h % a != 0:
            problems.append(
                f"model.hidden_size = {h}: must be a multiple of model.n_heads = {a} "
                f"(head_dim = hidden_size / n_heads must be a whole number)"
            )
        elif whole(a) and whole(kv, 0) and kv and a % kv != 0:
            problems.append(f"model.n_kv_heads = {kv}: must divide model.n_heads = {a} (each key and value "
                            f"head serves the same number of query heads)")
        if problems:
            raise InputError(problems)

    @property
    def head_size(self) -> int:
        """Elements per head per token: head_dim, or hidden_size / n_heads."""
        return self.head_dim or self.hidden_size // self.n_heads

    @property
    def attention_size(self) -> int:
        """D, elements of the queries (and of attention's output) per token: n_heads x head_size (H
        unless head_dim says otherwise)."""
        return self.n_heads * self.head_size

    @property
    def ffn_size(self) -> int:
        """F, the feed-forward hidden width in elements: ffn_width, or ffn_multiplier x hidden_size."""
        return self.ffn_width or self.ffn_multiplier * self.hidden_size

    @property
    def kv_heads(self) -> int:
        """Heads of keys and values: n_kv_heads, or n_heads (multi-head attention)."""
        return self.n_kv_heads or self.n_heads

    @property
    def kv_size(self) -> int:
        """K, elements of keys (and of values) per token: kv_heads x head_size (H without grouping)."""
        return self.kv_heads * self.head_size

    @property
    def keys(self) -> int:
        """L, keys (and values) each new token attends to: context + seq_len."""
        return self.context + self.seq_len

    @property
    def tokens(self) -> int:
        """T, tokens per step: batch x seq_len."""
        return self.batch * self.seq_len

    @property
    def element_bytes(self) -> int:
        """e, bytes per element of activations and weights at this precision."""
        return PRECISION_BYTES[self.precision]


#: The Model's true-or-false fields.
_SWITCHES = ("bias", "qkv_bias", "shared_norm", "tied_head", "pooler")


@dataclass(frozen=True)
class Operator:
    """One operator of one layer, with its work and traffic (docs/rdu.md, "Operators").

    name: "layer<i>.<op>" for forward, "layer<i>.<op>.backward" for backward; layer: 0-based block
    index; kind: one of OPERATOR_KINDS; phase: "forward" or "backward"; flops: floating-point
    operations (multiply and add count two); weight_bytes, input_bytes, output_bytes: bytes read as
    weights, read as activations, written.
    """

    name: str
    layer: int
    kind: str
    phase: str
    flops: int
    weight_bytes: int
    input_bytes: int
    output_bytes: int

    @property
    def bytes_moved(self) -> int:
        """Bytes read and written: weight_bytes + input_bytes + output_bytes."""
        return self.weight_bytes + self.input_bytes + self.output_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (docs/design.md, "Metrics"); inf for FLOPs that move no bytes."""
        moved = self.bytes_moved
        if moved == 0:
            return float("inf") if self.flops else 0.0
        return self.flops / moved


def _layer_elements(model: Model) -> dict[str, tuple[str, int, int, int, int]]:
    """Per operator of one block: (kind, flops, weight elements, input elements, output elements).

    The one place the per-layer formulas live; `operators` and `parameter_count` both read it. A block
    with a shared norm (Falcon's parallel attention) has no "ln2".
    """
    t, h, a, s, b, f = model.tokens, model.hidden_size, model.n_heads, model.seq_len, model.batch, model.ffn_size
    d, kv, keys = model.attention_size, model.kv_size, model.keys
    beta = 1 if model.bias else 0  # biases: one per output column of a projection
    qkv_beta = 1 if model.bias or model.qkv_bias else 0
    norm_flops, norm_params = NORMS[model.norm]
    ln = ("norm", norm_flops * t * h, norm_params * h, t * h, t * h)
    residual = ("elementwise", t * h, 0, 2 * t * h, t * h)
    qkv = d + 2 * kv  # Q, K and V columns
    g, act_flops = MLP_SHAPES[model.mlp]  # a gated MLP's up projection is the gate and the up side by side
    out = {
        "ln1": ln,
        "qkv_proj": ("gemm", 2 * t * h * qkv, h * qkv + qkv_beta * qkv, t * h, t * qkv),
        "attn_scores_softmax": (
            "attention",
            2 * b * s * keys * d + SOFTMAX_FLOPS_PER_SCORE * b * a * s * keys,
            0,
            t * d + b * keys * kv,
            b * a * s * keys,
        ),
        "attn_v": ("attention", 2 * b * s * keys * d, 0, b * a * s * keys + b * keys * kv, t * d),
        "out_proj": ("gemm", 2 * t * d * h, d * h + beta * h, t * d, t * h),
        "residual1": residual,
        "ln2": ln,
        "ffn_up": ("gemm", 2 * t * h * g * f, h * g * f + beta * g * f, t * h, g * t * f),
        "gelu": ("elementwise", act_flops * t * f, 0, g * t * f, t * f),
        "ffn_down": ("gemm", 2 * t * f * h, f * h + beta * h, t * f, t * h),
        "residual2": residual,
    }
    if model.shared_norm:
        del out["ln2"]
    return out


def refuse_a_decode_run(scenario) -> None:
    """InputError where the scenario's step has a key-value cache (workload.context > 0): `meshsim
    roofline` shows such a step's operators and their bounds, but no machine runs one yet (docs/design.md,
    "A step with a key-value cache")."""
    workload = scenario.values.get("workload", {})
    context = workload.get("context", 0)
    if workload.get("type") in ("layer_pipeline", "transformer") and context:
        raise InputError([f"workload.context = {context}: a step with a key-value cache (a decode step) is counted "
                          "but not run: `meshsim roofline` shows its operators and their bounds; no machine's decode "
                          "layout is modelled yet, so run and validate refuse it (set context = 0)"])


def cached_kv_bytes(model: Model, op_name: str) -> int:
    """Bytes of an operator's input that come from the key-value cache rather than from the operators
    before it: the context's keys for attn_scores_softmax, its values for attn_v (B context K e
    each); 0 for every other operator and without a cache."""
    short = op_name.split(".")[1] if "." in op_name else op_name
    if short not in ("attn_scores_softmax", "attn_v", "attention"):
        return 0
    per = model.batch * model.context * model.kv_size * model.element_bytes
    return 2 * per if short == "attention" else per


#: The workload keys a Model is built from (docs/design.md, "Scenario files").
MODEL_KEYS = ("hidden_size", "n_layers", "n_heads", "seq_len", "batch", "ffn_multiplier", "precision", "n_kv_heads",
              "ffn_width", "mlp", "bias", "head_dim", "norm", "qkv_bias", "shared_norm", "positions", "max_positions",
              "tied_head", "token_types", "pooler", "context")


def model_from_workload(workload: dict, batch: int | None = None) -> Model:
    """The Model of a resolved workload section (MODEL_KEYS; older result files' sections may lack the
    later keys, which then take Model's defaults); `batch` replaces the workload's batch."""
    kw = {k: workload[k] for k in MODEL_KEYS if k in workload}
    if batch is not None:
        kw["batch"] = batch
    return Model(**kw)


def backward_of(op: Operator) -> Operator:
    """The backward operator of a forward one, under the assumptions stated in `operators`, and for the
    operators around the blocks (edge_operators): the loss's backward reads the softmax it kept and the
    targets (its forward input's size) and writes the logits' gradient (its forward output's size); the
    embedding's reads the gradient of its output and writes the gradient of the rows it looked up (as
    large), the token ids having none."""
    flops = BACKWARD_FLOPS_FACTOR[op.kind] * op.flops
    if op.name == LOSS:
        return Operator(f"{op.name}.backward", op.layer, op.kind, "backward", flops, op.weight_bytes, op.input_bytes,
                        op.output_bytes)
    if op.name == EMBEDDING:
        return Operator(f"{op.name}.backward", op.layer, op.kind, "backward", flops, op.weight_bytes, op.output_bytes,
                        op.output_bytes)
    grad_out = op.weight_bytes if op.kind in ("gemm", "norm") else 0
    return Operator(
        name=f"{op.name}.backward",
        layer=op.layer,
        kind=op.kind,
        phase="backward",
        flops=flops,
        weight_bytes=op.weight_bytes,
        input_bytes=op.output_bytes + op.input_bytes,
        output_bytes=op.input_bytes + grad_out,
    )


def operators(model: Model, training: bool = False) -> list[Operator]:
    """The operators of the transformer blocks in execution order (docs/mesh.md, docs/rdu.md, docs/ipu.md).

    With T = batch x seq_len tokens, H hidden size, A heads, S seq_len, B batch, L = context + S the
    keys each new token attends to (S without a key-value cache), F the feed-forward
    width (ffn_size), D = attention_size the elements of the queries per token (H unless head_dim
    says otherwise), K = kv_size the elements of keys (and of values) per token (D without
    grouped-query attention), Q = D + 2K, g = 2 for a gated MLP (gated, geglu) and 1 otherwise, a the
    activation's FLOPs an element (MLP_SHAPES: gelu 8, relu 1, gated 5, geglu 9), n and m the norm's
    FLOPs and parameters an element (NORMS: layernorm 8 and 2, rmsnorm 4 and 1), beta = 1 with biases
    and 0 without, and beta_q = 1 with biases or qkv_bias, each layer i runs, as "layer<i>.<op>"
    (elements; bytes = elements x e, e = element bytes):

        op                   kind         flops                       weights        in             out
        ln1                  norm         n T H                       m H            T H            T H
        qkv_proj             gemm         2 T H Q                     H Q + beta_q Q T H            T Q
        attn_scores_softmax  attention    2 B S L D + 5 B A S L       0              T D + B L K    B A S L
        attn_v               attention    2 B S L D                   0              B A S L + B L K T D
        out_proj             gemm         2 T D H                     D H + beta H   T D            T H
        residual1            elementwise  T H                         0              2 T H          T H
        ln2                  norm         n T H                       m H            T H            T H
        ffn_up               gemm         2 T H g F                   g (H F + beta F) T H          g T F
        gelu                 elementwise  a T F                       0              g T F          T F
        ffn_down             gemm         2 T F H                     F H + beta H   T F            T H
        residual2            elementwise  T H                         0              2 T H          T H

    The gated MLP's ffn_up is its gate and up projections as one GEMM, and its "gelu" operator is
    SiLU(gate) x up (GeLU(gate) x up for geglu, ReLU for relu), named for what it computes
    (ACTIVATIONS: "layer<i>.swiglu", "layer<i>.geglu", "layer<i>.relu"). With shared_norm the block has no ln2:
    attention and the MLP both read ln1's output (Falcon's parallel attention; the two residual adds
    are the same count of adds as x + attention + MLP). GPT-NeoX's parallel residual, two norms read
    side by side, has the FLOPs and bytes of the sequential block and is counted as one.
    Counting conventions: a multiply-add is 2 FLOPs; GEMM FLOPs leave out the bias add; LayerNorm
    counts 8 FLOPs per element (mean, variance, normalise, scale, shift); GeLU counts 8 per element
    (tanh approximation); softmax counts 5 per score (scale, max, exp, sum, divide); Q K^T and
    scores x V are 2 B S L D each, over all heads together. Weights include biases and the
    LayerNorm scale and shift.

    With a key-value cache (context > 0) each sequence's S new tokens attend to its L = context + S
    keys: attention reads the cached keys and values (B context K elements each) besides the new ones
    the step's qkv_proj made, the cache's part from memory (`cached_kv_bytes`). Appending the new
    tokens' keys and values to the cache (2 B S K elements a layer, 1 / context of what a decode step
    reads) is not counted.

    training=True appends, after every forward operator, the backward operators in reverse order
    (layer n_layers-1 first, and the operators of a layer last to first), named
    "layer<i>.<op>.backward" with phase "backward". Modelling assumptions:

    - FLOPs: a GEMM's backward is 2x its forward (the input gradient and the weight gradient are one
      GEMM each), attention's is 2x its forward, norm and elementwise backward are 1x forward.
    - weight_bytes: as forward (the weights are read again).
    - input_bytes: the gradient of the forward output + the saved forward input
      (forward output_bytes + forward input_bytes).
    - output_bytes: the gradient of the forward input (forward input_bytes), plus the weight
      gradient (forward weight_bytes) for gemm and norm.

    The embedding, final norm, output head and loss are `edge_operators`; the optimiser update is
    `update_cost`; activation recomputation and dropout are not modelled here.
    """
    e = model.element_bytes
    per_layer = _layer_elements(model)
    forward = []
    act = ACTIVATIONS[model.mlp]
    for layer in range(model.n_layers):
        for op_name in (n for n in LAYER_OPERATORS if n in per_layer):
            kind, flops, w, i, o = per_layer[op_name]
            name = act if op_name == "gelu" else op_name
            forward.append(Operator(f"layer{layer}.{name}", layer, kind, "forward", flops, w * e, i * e, o * e))
    if not training:
        return forward
    return forward + [backward_of(op) for op in reversed(forward)]


#: The operators around the blocks (edge_operators), by name.
EMBEDDING, FINAL_NORM, POOLER, HEAD, LOSS = ("embedding.lookup", "head.final_norm", "head.pooler", "head.logits",
                                              "head.loss")
#: Bytes of a token id (int32).
ID_BYTES = 4


def position_rows(model: Model) -> int:
    """Rows of the learned position table: max_positions, or context + seq_len; 0 for rotary and ALiBi
    positions."""
    if model.positions != "learned":
        return 0
    return model.max_positions or model.keys


def table_rows(model: Model, vocab_size: int) -> int:
    """Rows of the embedding's tables: the token table (V), the learned position table (position_rows)
    and the token-type table (token_types)."""
    return vocab_size + position_rows(model) + model.token_types


def edge_operators(model: Model, vocab_size: int) -> tuple[list[Operator], list[Operator]]:
    """The operators of a step outside the transformer blocks, forward (docs/design.md, "The whole
    step"): (before block 0, after the last block). With T tokens, B sequences, H hidden size, P rows of
    the learned position table (position_rows: max_positions or S; 0 for rotary positions), Y rows of
    the token-type table (token_types), V vocab_size, n and m the norm's FLOPs and parameters an
    element (NORMS) and e element bytes (token ids 4 bytes each):

        op                kind         flops    weights        in           out
        embedding.lookup  elementwise  T H      (V + P + Y) H  4T           T H
        head.final_norm   norm         n T H    m H            T H          T H
        head.pooler       gemm         2 B H H  H H + H        B H          B H     (with pooler)
        head.logits       gemm         2 T H V  V H            T H          T V
        head.loss         elementwise  5 T V    0              T V + 4T     T V

    The embedding looks up each token's row of the token table (and with learned positions adds its
    position's row, with a token-type table its type's row); the pooler (BERT) is a dense layer on
    each sequence's first token; the head projects onto the vocabulary with the token table itself (tied_head:
    GPT-2, OPT, Falcon, Gemma) or with a V x H table of its own (Llama, Mistral, Qwen2, Phi-3,
    GPT-NeoX), V H weight bytes read either way (edge_parameter_count counts a tied table once); the
    loss is softmax cross-entropy against the next token (5 FLOPs per logit, as softmax), and its
    output is the softmax it keeps for its backward pass (as Megatron's cross-entropy does; the T
    losses are negligible beside it), so it works across the vocabulary's V columns. Backward
    (backward_of): the logits GEMM 2x, the others 1x; the loss's reads the softmax and the targets and
    writes the logits' gradient; the embedding's writes the gradient of the rows it read. vocab_size =
    0: none."""
    if not vocab_size:
        return [], []
    e, t, h, v = model.element_bytes, model.tokens, model.hidden_size, vocab_size
    norm_flops, norm_params = NORMS[model.norm]
    end = model.n_layers
    first = [Operator(EMBEDDING, -1, "elementwise", "forward", t * h, table_rows(model, v) * h * e, ID_BYTES * t,
                      t * h * e)]
    last = [Operator(FINAL_NORM, end, "norm", "forward", norm_flops * t * h, norm_params * h * e, t * h * e,
                     t * h * e)]
    if model.pooler:
        b = model.batch
        last.append(Operator(POOLER, end, "gemm", "forward", 2 * b * h * h, (h * h + h) * e, b * h * e, b * h * e))
    last += [Operator(HEAD, end, "gemm", "forward", 2 * t * h * v, v * h * e, t * h * e, t * v * e),
            Operator(LOSS, end, "elementwise", "forward", 5 * t * v, 0, t * v * e + ID_BYTES * t, t * v * e)]
    return first, last


def edge_parameter_count(model: Model, vocab_size: int) -> int:
    """Parameters outside the blocks: the token table (V H), the learned position table (P H), the
    token-type table (Y H), the final norm (m H), the pooler (H H + H) and an untied head's own table
    (V H); 0 without a vocabulary."""
    if not vocab_size:
        return 0
    h = model.hidden_size
    head = 0 if model.tied_head else vocab_size * h
    pooler = h * h + h if model.pooler else 0
    return table_rows(model, vocab_size) * h + NORMS[model.norm][1] * h + pooler + head


def parameter_count(model: Model) -> int:
    """Weights and biases of the transformer blocks (no embeddings, final norm or output head).

    Per layer 12 H^2 + 13 H with the default F = 4H (GPT-2): qkv 3H^2 + 3H, out H^2 + H, ffn_up H F + F,
    ffn_down F H + H, two LayerNorms 2H each; in general, with the names of `operators`,
    H Q + D H + (g + 1) H F + (norms) m H + beta (Q + H + g F + H) (+ Q with qkv_bias alone).
    """
    per_layer = sum(w for _, _, w, _, _ in _layer_elements(model).values())
    return model.n_layers * per_layer


def model_parameters(model: Model, vocab_size: int) -> dict:
    """The model's parameters as its published counts give them: "total", every weight and bias (the
    blocks and edge_parameter_count); "without_embeddings", the total less the token table, the
    position table, the token-type table and an untied head (the blocks, the final norm and the pooler,
    as Kaplan et al. and the Pythia suite count non-embedding parameters)."""
    total = parameter_count(model) + edge_parameter_count(model, vocab_size)
    tables = 0
    if vocab_size:
        tables = table_rows(model, vocab_size) * model.hidden_size
        tables += 0 if model.tied_head else vocab_size * model.hidden_size
    return dict(total=total, without_embeddings=total - tables)


def describe_model(model: Model, vocab_size: int) -> str:
    """The model simulated on one line: its parameters (with and without the embeddings) and its shape."""
    p = model_parameters(model, vocab_size)
    cached = f" after {model.context:,} cached tokens" if model.context else ""
    heads = f"{model.n_heads} heads of {model.head_size}"
    if model.kv_heads != model.n_heads:
        heads += f" ({model.kv_heads} key-value)"
    bias = "biases" if model.bias else ("QKV biases" if model.qkv_bias else "no biases")
    if vocab_size:
        positions = (f"learned positions ({position_rows(model):,})" if model.positions == "learned"
                     else f"{model.positions} positions")
        types = f", {model.token_types:,} token types" if model.token_types else ""
        pooler = ", pooler" if model.pooler else ""
        edges = (f"{positions}{types}, vocabulary {vocab_size:,}{pooler}, "
                 f"{'tied' if model.tied_head else 'untied'} head")
    else:
        edges = "the blocks alone (vocab_size 0: no embedding or head)"
    return (f"{_count(p['total'])} parameters ({_count(p['without_embeddings'])} without embeddings): "
            f"{model.n_layers} layers, H {model.hidden_size:,}, {heads}, {model.mlp} MLP {model.ffn_size:,}, "
            f"{model.norm}{', shared norm' if model.shared_norm else ''}, {bias}, {edges}; {model.precision}, "
            f"seq_len {model.seq_len:,}{cached}, batch {model.batch:,}")


def scenario_model(values: dict) -> tuple[Model, int] | None:
    """(the Model, vocab_size) of a resolved scenario whose workload is a transformer (layer_pipeline,
    transformer or decode), else None."""
    wl = values.get("workload", {})
    if wl.get("type") not in ("layer_pipeline", "transformer", "decode"):
        return None
    if wl["type"] == "decode":  # one new token a step, one sequence (docs/decode.md)
        return model_from_workload({**wl, "seq_len": 1}, batch=1), int(wl.get("vocab_size", 0))
    return model_from_workload(wl), int(wl.get("vocab_size", 0))


def _count(n: int) -> str:
    """A parameter count as people quote it, with the exact figure: 6.74 B (6,738,415,616)."""
    for scale, unit in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= scale:
            return f"{n / scale:.3g} {unit} ({n:,})"
    return f"{n:,}"


def weight_bytes(model: Model) -> int:
    """Bytes of the transformer blocks' weights at the model's precision: parameter_count x e."""
    return parameter_count(model) * model.element_bytes


def totals(ops) -> dict:
    """Sums over a list of Operators, all exact integers.

    flops, forward_flops, backward_flops: FLOPs of all, forward and backward operators;
    weight_bytes: weight bytes read by the operators (with training the weights count twice, once
    per phase; for the size of the weights use `weight_bytes(model)`); bytes_moved: all bytes read
    and written.
    """
    forward_flops = sum(op.flops for op in ops if op.phase == "forward")
    backward_flops = sum(op.flops for op in ops if op.phase == "backward")
    return dict(
        flops=forward_flops + backward_flops,
        forward_flops=forward_flops,
        backward_flops=backward_flops,
        weight_bytes=sum(op.weight_bytes for op in ops),
        bytes_moved=sum(op.bytes_moved for op in ops),
    )


def mesh_weight_fit(model: Model, n_pes: int, sram_kib: int) -> tuple[bool, str]:
    """Whether the transformer blocks' weights fit in the mesh's SRAM (docs/mesh.md, "Weight streaming").

    Capacity = n_pes x sram_kib x 1024 bytes (the WSE-2: ~850,000 PEs x 48 KiB). Returns (fits,
    message); the message states the weight bytes, the capacity and the fraction used, and when the
    weights do not fit it suggests weight streaming. Only weights are counted: activations,
    gradients and optimizer state would need room too. Bad n_pes or sram_kib raise InputError.
    """
    problems = []
    for name, value in (("n_pes", n_pes), ("sram_kib", sram_kib)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} = {value!r}: must be an integer >= 1")
    if problems:
        raise InputError(problems)
    need = weight_bytes(model)
    capacity = n_pes * sram_kib * 1024
    fraction = need / capacity
    head = (
        f"transformer block weights {need:,} bytes ({parameter_count(model):,} parameters x "
        f"{model.element_bytes} bytes {model.precision}); SRAM {n_pes:,} PEs x {sram_kib} KiB = {capacity:,} bytes; "
        f"fraction used {fraction:.4g}"
    )
    if need <= capacity:
        return True, f"{head}: fits"
    per_layer = need // model.n_layers
    return False, (
        f"{head}: does not fit; use weight streaming (hold the weights off-chip and stream them in "
        f"layer by layer, {per_layer:,} bytes per layer)"
    )


#: Tensor parallelism, Megatron style (docs/rdu.md, "Operators"; docs/ipu.md, "Tensor parallelism"):
#: the operators split over the t chips of a tensor group, each with whether its input and its output
#: are split. qkv_proj and ffn_up are column-parallel (whole input, split output), out_proj and
#: ffn_down row-parallel (split input, whole output of partial sums), the others work on split heads
#: or columns. LayerNorms, residual adds and the embedding are replicated.
TP_SPLIT = {"qkv_proj": (False, True), "attn_scores_softmax": (True, True), "attn_v": (True, True),
            "out_proj": (True, False), "ffn_up": (False, True), "ffn_down": (True, False),
            **{name: (True, True) for name in ACTIVATIONS.values()}}

#: (operator, phase) whose output is all-reduced over the tensor group: the row-parallel projections
#: forward, the input gradient of the column-parallel ones backward.
TP_ALLREDUCE_AFTER = {("out_proj", "forward"), ("ffn_down", "forward"), ("qkv_proj", "backward"),
                      ("ffn_up", "backward")}


def tensor_split(op: Operator, t: int) -> Operator:
    """A forward operator as each of the t chips of a tensor group runs it (TP_SPLIT): ceil(F / t)
    FLOPs, ceil(W / t) weight bytes, a split input or output ceil(I / t) or ceil(O / t) bytes; the
    others whole. (With t dividing n_heads, as every machine requires, the divisions are exact.)"""
    short = op.name.split(".")[-1]
    if t == 1 or short not in TP_SPLIT:
        return op
    split_in, split_out = TP_SPLIT[short]

    def part(x: int) -> int:
        return -(-x // t)

    return replace(op, flops=part(op.flops), weight_bytes=part(op.weight_bytes),
                   input_bytes=part(op.input_bytes) if split_in else op.input_bytes,
                   output_bytes=part(op.output_bytes) if split_out else op.output_bytes)


#: Optimisers of a training step: name -> (state bytes per parameter, FLOPs per parameter of the
#: update). SGD keeps no state and does w -= lr g (2 FLOPs); Adam keeps two fp32 moments (8 bytes) and
#: does m = b1 m + (1 - b1) g (3), v = b2 v + (1 - b2) g^2 (4), w -= lr m / (sqrt(v) + eps) (5): 12.
OPTIMIZERS = {"none": (0, 0), "sgd": (0, 2), "adam": (8, 12)}


def update_cost(precision: str, master_weights: str, optimizer: str) -> dict:
    """Per parameter, what a training step's optimiser update holds and moves (docs/design.md,
    "Metrics": precision and the update), with e the precision's bytes and w the master weights' (4 with
    master_weights = "fp32", else e):

    - held: bytes kept beyond the e-byte weights the model computes with: the fp32 master copy
      (with master_weights = "fp32") and the optimiser's state;
    - read: the gradient (e), the master weights (w) and the state;
    - written: the master weights, the state, and with an fp32 master the e-byte copy computed with;
    - flops: the update's FLOPs (OPTIMIZERS).

    All zero with optimizer = "none" (no update modelled)."""
    if optimizer == "none":
        return dict(held=0, read=0, written=0, flops=0)
    e = PRECISION_BYTES[precision]
    fp32 = master_weights == "fp32"
    w = 4 if fp32 else e
    state, flops = OPTIMIZERS[optimizer]
    return dict(held=(w if fp32 else 0) + state, read=e + w + state, written=w + state + (e if fp32 else 0),
                flops=flops)


def compute_rate(precision: str, fp32_rate: float):
    """The compute rate at `precision` as an exact fraction of the machine's 16-bit peak: for fp32
    and tf32 (FP32_COMPUTE) the fraction nearest fp32_rate with a denominator of at most
    RATE_DENOMINATOR (so that exact integer costs stay within 64 bits), 1 otherwise."""
    if precision not in FP32_COMPUTE:
        return Fraction(1)
    return Fraction(str(fp32_rate)).limit_denominator(RATE_DENOMINATOR)


#: The largest denominator of a compute rate (compute_rate): a millionth is finer than any rate is known.
RATE_DENOMINATOR = 10**6

"""Models from a Hugging Face `config.json` (docs/design.md, "Models from a config.json").

`workload.model_config` names a local config.json; it is the model: its fields give every workload
key of the model's shape (`SHAPE_KEYS`), and a scenario file that sets one of them to another value
is refused (scenario.py says how a command-line override wins). `seq_len` and `precision` are the
run's to choose: the config fills them only when the scenario leaves them out.

Ten families are read, each from its documented architecture (the transformers library's
configuration and modelling code of the family): the decoders GPT-2, Llama, Mistral, Qwen2, Phi-3,
Gemma, Falcon, OPT and GPT-NeoX, and the encoder BERT (`FAMILIES`). What each field becomes is the family's row of
`FAMILIES` and the rules of `read`; docs/design.md has the table. A mixture of experts is refused by
its fields (`MOE_FIELDS`): meshsim models dense MLPs. Fields that change neither FLOPs nor bytes
(dropout, RoPE scaling, norm epsilon, token ids) are not read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True)
class Family:
    """How one family's config gives the model (docs/design.md, "Models from a config.json").

    fields: ((config field, workload key, required), ...), read as integers (the activation, dtype and
    switch fields by `read`'s rules); activation: the field naming the MLP's activation (first present
    of the names) and the MLP kind each activation means; fixed: the keys the family's architecture
    fixes; tied: whether the output head is the token table when tie_word_embeddings is absent (the
    family's config class default); positions_offset: rows of the learned position table beyond
    max_position_embeddings (OPT keeps 2)."""

    fields: tuple
    activation: tuple
    fixed: dict
    tied: bool
    positions_offset: int = 0


_GELU = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python")
_SILU = ("silu", "swish")
_LLAMA_FIELDS = (("hidden_size", "hidden_size", True), ("num_hidden_layers", "n_layers", True),
                 ("num_attention_heads", "n_heads", True), ("num_key_value_heads", "n_kv_heads", False),
                 ("head_dim", "head_dim", False), ("intermediate_size", "ffn_width", True),
                 ("max_position_embeddings", "seq_len", True), ("vocab_size", "vocab_size", True))
_ROTARY_RMS = dict(norm="rmsnorm", positions="rotary", max_positions=0, shared_norm=False)

#: model_type -> its Family.
FAMILIES = {
    "gpt2": Family(
        (("n_embd", "hidden_size", True), ("n_layer", "n_layers", True), ("n_head", "n_heads", True),
         ("n_inner", "ffn_width", False), ("n_positions", "seq_len", True), ("vocab_size", "vocab_size", True)),
        (("activation_function",), {a: "gelu" for a in _GELU}),
        dict(bias=True, qkv_bias=False, norm="layernorm", positions="learned", shared_norm=False, n_kv_heads=0,
             head_dim=0), tied=True),
    "llama": Family(_LLAMA_FIELDS, (("hidden_act",), {a: "gated" for a in _SILU}), dict(_ROTARY_RMS, qkv_bias=False),
                    tied=False),
    "qwen2": Family(_LLAMA_FIELDS, (("hidden_act",), {a: "gated" for a in _SILU}),
                    dict(_ROTARY_RMS, bias=False, qkv_bias=True), tied=False),
    "phi3": Family(_LLAMA_FIELDS, (("hidden_act",), {a: "gated" for a in _SILU}),
                   dict(_ROTARY_RMS, bias=False, qkv_bias=False), tied=False),
    "gemma": Family(_LLAMA_FIELDS, (("hidden_activation", "hidden_act"), {a: "geglu" for a in _GELU}),
                    dict(_ROTARY_RMS, bias=False, qkv_bias=False), tied=True),
    "falcon": Family(
        (("hidden_size", "hidden_size", True), ("num_hidden_layers", "n_layers", True),
         ("num_attention_heads", "n_heads", True), ("ffn_hidden_size", "ffn_width", False),
         ("max_position_embeddings", "seq_len", False), ("vocab_size", "vocab_size", True)),
        (("activation",), {a: "gelu" for a in _GELU}),
        dict(norm="layernorm", qkv_bias=False, max_positions=0, head_dim=0), tied=True),
    "opt": Family(
        (("hidden_size", "hidden_size", True), ("num_hidden_layers", "n_layers", True),
         ("num_attention_heads", "n_heads", True), ("ffn_dim", "ffn_width", True),
         ("max_position_embeddings", "seq_len", True), ("vocab_size", "vocab_size", True)),
        (("activation_function",), {"relu": "relu", **{a: "gelu" for a in _GELU}}),
        dict(norm="layernorm", qkv_bias=False, positions="learned", shared_norm=False, n_kv_heads=0, head_dim=0),
        tied=True, positions_offset=2),
    "gpt_neox": Family(
        (("hidden_size", "hidden_size", True), ("num_hidden_layers", "n_layers", True),
         ("num_attention_heads", "n_heads", True), ("intermediate_size", "ffn_width", True),
         ("max_position_embeddings", "seq_len", True), ("vocab_size", "vocab_size", True)),
        (("hidden_act",), {a: "gelu" for a in _GELU}),
        dict(norm="layernorm", qkv_bias=False, positions="rotary", max_positions=0, shared_norm=False,
             n_kv_heads=0, head_dim=0), tied=False),
    "bert": Family(
        (("hidden_size", "hidden_size", True), ("num_hidden_layers", "n_layers", True),
         ("num_attention_heads", "n_heads", True), ("intermediate_size", "ffn_width", True),
         ("max_position_embeddings", "seq_len", True), ("vocab_size", "vocab_size", True),
         ("type_vocab_size", "token_types", False)),
        (("hidden_act",), {a: "gelu" for a in _GELU}),
        dict(bias=True, qkv_bias=False, norm="layernorm", positions="learned", shared_norm=False, n_kv_heads=0,
             head_dim=0, pooler=True), tied=True),
}
FAMILIES["mistral"] = FAMILIES["llama"]

#: The model classes named in a config's "architectures", for configs without a model_type.
ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "GPT2Model": "gpt2", "LlamaForCausalLM": "llama",
                 "LlamaModel": "llama", "MistralForCausalLM": "mistral", "MistralModel": "mistral",
                 "Qwen2ForCausalLM": "qwen2", "Phi3ForCausalLM": "phi3", "GemmaForCausalLM": "gemma",
                 "FalconForCausalLM": "falcon", "RWForCausalLM": "falcon", "OPTForCausalLM": "opt",
                 "GPTNeoXForCausalLM": "gpt_neox", "BertModel": "bert", "BertForMaskedLM": "bert",
                 "BertForPreTraining": "bert"}

#: Every workload key a config gives.
KEYS = ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_width", "mlp", "bias", "qkv_bias",
        "norm", "shared_norm", "positions", "max_positions", "tied_head", "token_types", "pooler", "vocab_size",
        "seq_len", "precision")
#: The keys a config gave before head_dim, norm and the other architecture keys: a scenario that sets
#: all of them is a result file's resolved scenario (every file lists them), which does not read its
#: config again; one written before those keys takes their defaults, the model it was run with.
RESOLVED_KEYS = ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "ffn_width", "mlp", "bias", "vocab_size",
                 "seq_len", "precision")
#: The keys that are the model itself: a scenario file may not contradict them.
SHAPE_KEYS = tuple(k for k in KEYS if k not in ("seq_len", "precision"))

#: Fields only a mixture of experts has; such a config is refused (meshsim models dense MLPs).
MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")

#: What to do with a family meshsim does not read.
BY_HAND = ("leave workload.model_config out and set the model's shape by hand (workload.hidden_size, n_layers, "
           "n_heads, n_kv_heads, head_dim, ffn_width, mlp, bias, qkv_bias, norm, shared_norm, positions, "
           "max_positions, tied_head, token_types, pooler, vocab_size: docs/design.md, \"Models from a config.json\")")

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def read(path: str, shown: str) -> tuple[dict, dict]:
    """The workload keys a config.json gives, as ({key: value}, {key: where it came from: the config
    field, or the family's default for an absent one}); `shown` names the file in messages.

    Raises InputError with one line per problem: the file, the field, its value and what is allowed."""
    config = _load(path, shown)
    kind = _family(config, shown)
    fam = FAMILIES[kind]
    problems, out, source = [], {}, {}

    def field(name):
        return f"{shown}: {name} = {json.dumps(config[name])}"

    for name, key, required in fam.fields:
        if name not in config or config[name] is None:
            if required:
                problems.append(f"{shown}: {name}: missing; a {kind} config gives it (it sets workload.{key})")
            continue
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{field(name)}: must be an integer")
        else:
            out[key], source[key] = value, name
    for key, value in fam.fixed.items():
        out[key], source[key] = value, f"the {kind} architecture"
    names, kinds = fam.activation
    act = next((n for n in names if config.get(n) is not None), None)
    if act is None:
        out["mlp"], source["mlp"] = next(iter(kinds.values())), f"the {kind} default ({names[0]} absent)"
    elif not isinstance(config[act], str) or config[act] not in kinds:
        problems.append(f"{field(act)}: meshsim models a {kind} MLP with {' or '.join(kinds)}")
    else:
        out["mlp"], source["mlp"] = kinds[config[act]], act
    _switches(config, kind, shown, out, source, field, problems)
    _dtype(config, out, source, field, problems)
    if problems:
        raise InputError(problems)
    _fill_absent(kind, fam, out, source)
    return out, source


def _load(path: str, shown: str) -> dict:
    """A config.json's fields, read as a bounded regular file; InputError for anything else."""
    from .files import read_bounded

    if not os.path.lexists(path):
        raise InputError([f"{shown}: no such model config file (looked for {path})"])
    data = read_bounded(path, shown, "model config")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError([f"{shown}: the model config is not UTF-8 text (bad byte at offset {e.start})"]) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError([f"{shown}: not JSON: {e.msg} at line {e.lineno}, column {e.colno}"]) from None
    except RecursionError:
        raise InputError([f"{shown}: its JSON nests too deep to read (a config.json's fields nest a few levels)"]) \
            from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError([f"{shown}: not a model config: {str(e).splitlines()[0]}"]) from None
    if not isinstance(config, dict):
        raise InputError([f"{shown}: a config.json must be a JSON object of fields"])
    moe = [f for f in MOE_FIELDS if config.get(f) not in (None, 0, 1, False)]
    if moe:
        raise InputError([f"{shown}: {moe[0]} = {json.dumps(config[moe[0]])}: a mixture of experts; meshsim models "
                          "dense MLPs only and would simulate another model, so it does not read this config "
                          f"(to study the dense model of the same shape, {BY_HAND})"])
    return config


def _flag(config, name, default, field, problems):
    """A true-or-false field, `default` when absent or null."""
    value = config.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        problems.append(f"{field(name)}: must be true or false")
        return default
    return value


def _switches(config, kind, shown, out, source, field, problems) -> None:
    """The family's rules for biases, key-value heads, positions and the norm, and the tied head."""
    def flag(name, default):
        return _flag(config, name, default, field, problems)

    out["tied_head"] = flag("tie_word_embeddings", FAMILIES[kind].tied)
    source["tied_head"] = "tie_word_embeddings" if "tie_word_embeddings" in config else f"the {kind} default"
    if kind in ("llama", "mistral"):
        att, mlp = flag("attention_bias", False), flag("mlp_bias", False)
        if att != mlp:
            problems.append(f"{shown}: attention_bias = {json.dumps(att)}, mlp_bias = {json.dumps(mlp)}: "
                            "meshsim models biases on every projection or on none")
        out["bias"], source["bias"] = att, "attention_bias"
    elif kind == "gpt_neox":  # the MLP always carries biases; attention_bias (absent: true) the attention's
        if not flag("attention_bias", True):
            problems.append(f"{field('attention_bias')}: meshsim models biases on every projection or on none, and "
                            "GPT-NeoX's MLP has them")
        out["bias"], source["bias"] = True, "attention_bias"
    elif kind == "opt":
        out["bias"], source["bias"] = flag("enable_bias", True), "enable_bias"
        proj = config.get("word_embed_proj_dim")
        if proj is not None and proj != config.get("hidden_size"):
            problems.append(f"{field('word_embed_proj_dim')}: an embedding narrower than hidden_size, projected in "
                            "and out, is not modelled (OPT-350m); meshsim reads OPT configs whose embedding is "
                            "hidden_size wide")
        if not flag("do_layer_norm_before", True):
            problems.append(f"{field('do_layer_norm_before')}: post-norm OPT blocks without a final norm "
                            "(OPT-350m) are not modelled")
    elif kind == "bert":
        kind_of_positions = config.get("position_embedding_type", "absolute")
        if kind_of_positions not in (None, "absolute"):
            problems.append(f"{field('position_embedding_type')}: relative position embeddings are not modelled; "
                            "meshsim reads BERT configs with absolute (learned) positions")
    elif kind == "falcon":
        new = flag("new_decoder_architecture", False)
        out["bias"], source["bias"] = flag("bias", False), "bias"
        out["positions"], source["positions"] = ("alibi" if flag("alibi", False) else "rotary"), "alibi"
        # one norm read by attention and the MLP side by side; the new decoder keeps one for each
        out["shared_norm"] = flag("parallel_attn", True) and not new
        source["shared_norm"] = "parallel_attn"
        if new:
            kv = config.get("num_kv_heads")
            if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1:
                problems.append(f"{shown}: num_kv_heads = {json.dumps(kv)}: the new decoder "
                                "architecture needs an integer number of key-value heads")
            else:
                out["n_kv_heads"], source["n_kv_heads"] = kv, "num_kv_heads"
        else:
            out["n_kv_heads"] = 1 if flag("multi_query", True) else 0
            source["n_kv_heads"] = "multi_query"


def _dtype(config, out, source, field, problems) -> None:
    """torch_dtype, or dtype as newer configs write it, as the precision."""
    for name in ("torch_dtype", "dtype"):
        value = config.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or value not in _DTYPES:
            problems.append(f"{field(name)}: must be one of {', '.join(_DTYPES)}")
        else:
            out["precision"], source["precision"] = _DTYPES[value], name
        return


def _fill_absent(kind: str, fam: Family, out: dict, source: dict) -> None:
    """The keys an absent field leaves, as the family's config class fills them."""
    h = out["hidden_size"]
    if "ffn_width" not in out:  # GPT-2's n_inner null, Falcon's ffn_hidden_size absent: 4 x hidden_size
        out["ffn_width"], source["ffn_width"] = 4 * h, f"the {kind} default (4 x hidden_size)"
    if "seq_len" not in out:  # Falcon's max_position_embeddings absent: 2,048
        out["seq_len"], source["seq_len"] = 2048, f"the {kind} default of max_position_embeddings"
    if "n_kv_heads" not in out:  # num_key_value_heads absent: as many as the query heads
        out["n_kv_heads"], source["n_kv_heads"] = 0, f"the {kind} default (as many as the query heads)"
    if out.get("head_dim") and out["head_dim"] * out["n_heads"] == h:
        out["head_dim"] = 0  # the width hidden_size / n_heads gives anyway
    out.setdefault("head_dim", 0)
    if "token_types" not in out:  # BERT's type_vocab_size absent: 2; no other family has the table
        out["token_types"] = 2 if kind == "bert" else 0
        source["token_types"] = f"the {kind} default" if kind == "bert" else f"the {kind} architecture"
    if "pooler" not in out:
        out["pooler"], source["pooler"] = False, f"the {kind} architecture"
    source.setdefault("head_dim", f"the {kind} default (hidden_size / num_attention_heads)")
    if out["positions"] == "learned":
        out["max_positions"] = out["seq_len"] + fam.positions_offset
        source["max_positions"] = source["seq_len"] + (f" + {fam.positions_offset}" if fam.positions_offset else "")


def _family(config: dict, shown: str) -> str:
    """The FAMILIES key of a config: its model_type, else its first architecture."""
    model_type = config.get("model_type")
    if model_type is not None:
        if not isinstance(model_type, str) or model_type not in FAMILIES:
            raise InputError([f"{shown}: model_type = {json.dumps(model_type)}: not a model meshsim reads; it reads "
                              f"{', '.join(sorted(FAMILIES))}; for another family, {BY_HAND}"])
        return model_type
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in ARCHITECTURES:
        return ARCHITECTURES[archs[0]]
    shown_archs = json.dumps(archs) if archs is not None else "missing"
    raise InputError([f"{shown}: model_type: missing, and architectures = {shown_archs} names no model meshsim "
                      f"reads; it reads model_type {', '.join(sorted(FAMILIES))} (architectures "
                      f"{', '.join(sorted(ARCHITECTURES))}); for another family, {BY_HAND}"])

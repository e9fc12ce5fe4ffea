"""Models from a Hugging Face `config.json` (docs/design.md, "Models from a config.json").

`workload.model_config` names a local config.json; its fields become the workload keys of the
model's shape that the scenario does not set itself. Two families are read:

- GPT-2 (`model_type` "gpt2"): n_embd, n_layer, n_head, n_positions, vocab_size, n_inner (null:
  4 x n_embd), activation_function (a GeLU); biases on every projection.
- Llama and Mistral (`model_type` "llama", "mistral"): hidden_size, num_hidden_layers,
  num_attention_heads, num_key_value_heads (absent: num_attention_heads, as the transformers library
  reads it), intermediate_size, max_position_embeddings, vocab_size, hidden_act (silu: a gated MLP),
  attention_bias and mlp_bias (absent: false).

Both: torch_dtype (or dtype, as newer configs write it), when present, gives the precision. A Llama or
Mistral head_dim other than hidden_size / num_attention_heads is refused (meshsim's heads are H / A
wide). Nothing else in the file is read; fields that change neither FLOPs nor bytes (dropout, RoPE,
norm epsilon, token ids) are left alone. The mapping is `FIELDS` below, one table the docs and the
tests read.
"""

from __future__ import annotations

import json
import os

from .errors import InputError

#: model_type -> ordered ((config field, workload key, required), ...). A field not required may be
#: absent; the rules for absent and special fields are in `read`.
FIELDS = {
    "gpt2": (("n_embd", "hidden_size", True), ("n_layer", "n_layers", True), ("n_head", "n_heads", True),
             ("n_positions", "seq_len", True), ("vocab_size", "vocab_size", True), ("n_inner", "ffn_width", False),
             ("activation_function", "mlp", False), ("torch_dtype", "precision", False), ("dtype", "precision", False)),
    "llama": (("hidden_size", "hidden_size", True), ("num_hidden_layers", "n_layers", True),
              ("num_attention_heads", "n_heads", True), ("num_key_value_heads", "n_kv_heads", False),
              ("intermediate_size", "ffn_width", True), ("max_position_embeddings", "seq_len", True),
              ("vocab_size", "vocab_size", True), ("hidden_act", "mlp", False), ("attention_bias", "bias", False),
              ("mlp_bias", "bias", False), ("torch_dtype", "precision", False), ("dtype", "precision", False),
              ("head_dim", "", False)),
}
FIELDS["mistral"] = FIELDS["llama"]

#: The model classes named in a config's "architectures", for configs without a model_type.
ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "GPT2Model": "gpt2", "LlamaForCausalLM": "llama",
                 "LlamaModel": "llama", "MistralForCausalLM": "mistral", "MistralModel": "mistral"}

#: Every workload key a config can fill.
KEYS = ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "seq_len", "ffn_width", "mlp", "bias", "vocab_size",
        "precision")

_GELU = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python")
_GATED = ("silu", "swish")
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def read(path: str, shown: str) -> tuple[dict, dict]:
    """The workload keys a config.json gives, as ({key: value}, {key: the config field it came from});
    `shown` names the file in messages.

    Raises InputError with one line per problem: the file, the field, its value and what is allowed."""
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
    kind = _family(config, shown)
    problems, out, source = [], {}, {}

    def field(name):
        return f"{shown}: {name} = {json.dumps(config[name])}"

    for name, key, required in FIELDS[kind]:
        if name not in config or config[name] is None:
            if required:
                problems.append(f"{shown}: {name}: missing; a {kind} config gives it (it sets workload.{key})")
            continue
        if key in source:  # dtype beside torch_dtype: the first wins
            continue
        value = config[name]
        if key in ("mlp", "precision") and not isinstance(value, str):
            problems.append(f"{field(name)}: must be a string")
        elif key == "mlp":
            allowed = _GELU if kind == "gpt2" else _GATED
            if value not in allowed:
                problems.append(f"{field(name)}: meshsim models a {kind} MLP with {' or '.join(allowed)}")
                continue
            out[key], source[key] = ("gelu" if kind == "gpt2" else "gated"), name
        elif key == "precision":
            if value not in _DTYPES:
                problems.append(f"{field(name)}: must be one of {', '.join(_DTYPES)}")
                continue
            out[key], source[key] = _DTYPES[value], name
        elif key == "bias":
            if not isinstance(value, bool):
                problems.append(f"{field(name)}: must be true or false")
        elif isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{field(name)}: must be an integer")
        elif key:
            out[key], source[key] = value, name
    if kind != "gpt2":
        # absent means false (as the transformers library reads them); meshsim has one switch for both
        att, mlp = (config.get(k) if isinstance(config.get(k), bool) else False for k in ("attention_bias", "mlp_bias"))
        if att != mlp:
            problems.append(f"{shown}: attention_bias = {json.dumps(att)}, mlp_bias = {json.dumps(mlp)}: meshsim "
                            "models biases on every projection or on none")
        hd = config.get("head_dim")
        heads, hidden = out.get("n_heads"), out.get("hidden_size")
        if isinstance(hd, int) and heads and hidden and hd * heads != hidden:
            problems.append(f"{field('head_dim')}: meshsim's heads are hidden_size / num_attention_heads = "
                            f"{hidden} / {heads} wide; a head_dim of another width is not modelled")
        out["bias"], source["bias"] = att, "attention_bias"
    if problems:
        raise InputError(problems)
    if kind == "gpt2":
        out.setdefault("mlp", "gelu")
        out["bias"] = True
    else:
        out.setdefault("mlp", "gated")
        # num_key_value_heads absent: as many as the query heads, whatever n_heads the scenario sets
        out.setdefault("n_kv_heads", 0)
    out.setdefault("ffn_width", 0)  # GPT-2's n_inner null: 4 x n_embd, workload.ffn_multiplier's default
    return out, source


def _family(config: dict, shown: str) -> str:
    """The FIELDS key of a config: its model_type, else its first architecture."""
    model_type = config.get("model_type")
    if model_type is not None:
        if not isinstance(model_type, str) or model_type not in FIELDS:
            raise InputError([f"{shown}: model_type = {json.dumps(model_type)}: not a model meshsim reads; "
                              f"it reads {', '.join(sorted(FIELDS))}"])
        return model_type
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in ARCHITECTURES:
        return ARCHITECTURES[archs[0]]
    shown_archs = json.dumps(archs) if archs is not None else "missing"
    raise InputError([f"{shown}: model_type: missing, and architectures = {shown_archs} names no model meshsim "
                      f"reads; it reads model_type {', '.join(sorted(FIELDS))} (architectures "
                      f"{', '.join(sorted(ARCHITECTURES))})"])

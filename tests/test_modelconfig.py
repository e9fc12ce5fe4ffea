"""Models from a Hugging Face config.json (docs/design.md, "Models from a config.json")."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.reference.ipu_ref import simulate
from meshsim.errors import InputError
from meshsim.run import run_scenario
from meshsim.scenario import load_scenario
from meshsim.transformer import Model, model_from_workload, operators, parameter_count

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "scenarios" / "models"

#: The published parameter counts of the shipped configs (scenarios/models/README.md): the weights
#: the transformers library reports for each checkpoint, embeddings and head included.
PUBLISHED = {"gpt2": 124_439_808, "gpt2-xl": 1_557_611_200, "llama-2-7b": 6_738_415_616,
             "mistral-7b": 7_241_732_096}


def values(text, *overrides, path=ROOT / "scenarios" / "x.toml"):
    return load_scenario(path, overrides, text=text).values


def ipu_with(config, extra=""):
    return f'[machine]\ntype = "ipu"\n[workload]\ntype = "transformer"\nmodel_config = "{config}"\n{extra}'


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_configs_give_the_published_parameter_counts(name):
    """The blocks (meshsim.transformer.parameter_count) plus the embeddings, the output head and the
    final norm, which the blocks leave out, are the checkpoint's count. Llama and Mistral normalise with
    RMSNorm, whose H-element scale is half the 2H of the LayerNorm meshsim counts: 2H a layer over."""
    w = values(ipu_with(f"models/{name}/config.json"))["workload"]
    m = model_from_workload(w)
    h, v = m.hidden_size, w["vocab_size"]
    if name.startswith("gpt2"):  # tied input and output embedding, learned positions, final LayerNorm
        total = parameter_count(m) + v * h + w["seq_len"] * h + 2 * h
        assert total == PUBLISHED[name]
    else:  # untied embedding and head, final RMSNorm
        total = parameter_count(m) + 2 * v * h + h
        assert total - 2 * h * m.n_layers == PUBLISHED[name]


def test_configs_fill_the_shape_and_gqa_and_the_gated_mlp():
    w = values(ipu_with("models/mistral-7b/config.json"))["workload"]
    assert {k: w[k] for k in ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "seq_len", "ffn_width", "mlp",
                              "bias", "vocab_size", "precision")} == dict(
        hidden_size=4096, n_layers=32, n_heads=32, n_kv_heads=8, seq_len=32768, ffn_width=14336, mlp="gated",
        bias=False, vocab_size=32000, precision="bf16")
    w = values(ipu_with("models/gpt2-xl/config.json"))["workload"]
    assert (w["hidden_size"], w["n_layers"], w["n_heads"], w["n_kv_heads"], w["ffn_width"], w["mlp"], w["bias"]) == (
        1600, 48, 25, 0, 0, "gelu", True)
    assert model_from_workload(w).ffn_size == 4 * 1600


def test_keys_the_scenario_sets_win_over_the_config():
    text = ipu_with("models/llama-2-7b/config.json", "seq_len = 512\nprecision = \"bf16\"\n")
    w = values(text, "workload.n_layers=4")["workload"]
    assert (w["seq_len"], w["precision"], w["n_layers"], w["hidden_size"]) == (512, "bf16", 4, 4096)
    # ffn_multiplier set by the scenario means the config's intermediate_size is not taken
    w = values(ipu_with("models/llama-2-7b/config.json", "ffn_multiplier = 2\n"))["workload"]
    assert (w["ffn_width"], model_from_workload(w).ffn_size) == (0, 8192)


def test_an_rdu_takes_the_configs_vocabulary_and_the_resolved_scenario_loads_again():
    text = ('[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\nmodel_config = '
            '"models/llama-2-7b/config.json"\nseq_len = 1024\n')
    sc = load_scenario(ROOT / "scenarios" / "x.toml", text=text)
    assert sc.values["workload"]["vocab_size"] == 32000  # the config's vocabulary, for the rdu's head
    assert sc.values["workload"]["hidden_size"] == 4096
    # the resolved form sets every key, so the config is not read again (it may be elsewhere by then)
    again = load_scenario(Path("/nonexistent/elsewhere.toml"), text=sc.resolved_toml())
    assert again.values == sc.values


def test_grouped_query_attention_and_the_gated_mlp_by_hand():
    t, h, a, kv, f = 6, 8, 4, 2, 12  # batch 2 x seq 3, head size 2, keys and values 4 elements a token
    base = dict(hidden_size=h, n_layers=1, n_heads=a, seq_len=3, batch=2, precision="fp32")
    mha = {o.name.split(".")[1]: o for o in operators(Model(**base))}
    gqa = {o.name.split(".")[1]: o for o in operators(Model(**base, n_kv_heads=kv, ffn_width=f, mlp="gated",
                                                            bias=False))}
    k = kv * h // a
    assert (gqa["qkv_proj"].flops, gqa["qkv_proj"].weight_bytes, gqa["qkv_proj"].output_bytes) == (
        2 * t * h * (h + 2 * k), 4 * h * (h + 2 * k), 4 * t * (h + 2 * k))
    assert gqa["qkv_proj"].flops < mha["qkv_proj"].flops
    assert gqa["attn_scores_softmax"].flops == mha["attn_scores_softmax"].flops
    assert gqa["attn_scores_softmax"].input_bytes == 4 * (t * h + t * k)
    assert gqa["attn_v"].input_bytes == 4 * (2 * a * 3 * 3 + t * k)
    assert (gqa["ffn_up"].flops, gqa["ffn_up"].weight_bytes, gqa["ffn_up"].output_bytes) == (
        2 * t * h * 2 * f, 4 * 2 * h * f, 4 * 2 * t * f)
    assert (gqa["gelu"].flops, gqa["gelu"].input_bytes, gqa["gelu"].output_bytes) == (5 * t * f, 4 * 2 * t * f,
                                                                                       4 * t * f)
    assert gqa["out_proj"].weight_bytes == 4 * h * h and mha["out_proj"].weight_bytes == 4 * (h * h + h)


def write_config(tmp_path, **fields):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return path


TINY_LLAMA = dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=32, vocab_size=100,
                  hidden_act="silu")


def problems_of(tmp_path, text, *overrides):
    scenario = tmp_path / "s.toml"
    scenario.write_text(text)
    with pytest.raises(InputError) as err:
        load_scenario(scenario, overrides)
    return err.value.problems


def test_bad_configs_name_the_file_the_field_and_what_is_allowed(tmp_path):
    text = ipu_with("config.json")
    write_config(tmp_path, model_type="bert", hidden_size=768)
    [p] = problems_of(tmp_path, text)
    assert 'workload.model_config = "config.json"' in p and 'model_type = "bert"' in p and "gpt2, llama, mistral" in p
    write_config(tmp_path, **{k: v for k, v in TINY_LLAMA.items() if k != "intermediate_size"})
    [p] = problems_of(tmp_path, text)
    assert "intermediate_size: missing" in p and "workload.ffn_width" in p
    write_config(tmp_path, **{**TINY_LLAMA, "hidden_act": "gelu"})
    [p] = problems_of(tmp_path, text)
    assert 'hidden_act = "gelu"' in p and "silu" in p
    write_config(tmp_path, **{**TINY_LLAMA, "num_attention_heads": 0, "torch_dtype": "int8"})
    lines = problems_of(tmp_path, text)
    assert any('torch_dtype = "int8"' in line and "bfloat16" in line for line in lines)
    write_config(tmp_path, **{**TINY_LLAMA, "num_attention_heads": 0})
    [p] = problems_of(tmp_path, text)
    assert "gives workload.n_heads = 0" in p and "[1, 1024]" in p
    write_config(tmp_path, **{**TINY_LLAMA, "num_key_value_heads": 3})
    [p] = problems_of(tmp_path, text)
    assert "workload.n_kv_heads = 3 (from the model config)" in p and "must divide workload.n_heads" in p
    (tmp_path / "config.json").write_text("{not json")
    [p] = problems_of(tmp_path, text)
    assert "not JSON" in p
    [p] = problems_of(tmp_path, ipu_with("nowhere.json"))
    assert "no such model config file" in p
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    [p] = problems_of(tmp_path, text)
    assert "model_type: missing" in p and "BertModel" in p


def test_a_bad_config_exits_2_without_a_traceback_and_writes_nothing(tmp_path):
    write_config(tmp_path, model_type="t5")
    scenario = tmp_path / "s.toml"
    scenario.write_text(ipu_with("config.json"))
    out = tmp_path / "r.h5"
    proc = subprocess.run([sys.executable, "-m", "meshsim", "run", str(scenario), "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and 'model_type = "t5"' in proc.stderr
    assert not list(tmp_path.glob("r*.h5"))


@pytest.mark.parametrize("tp", [1, 2])
def test_the_ipu_kernel_matches_its_reference_on_a_config_with_gqa_and_a_gated_mlp(tmp_path, tp):
    from tests.test_ipu import assert_matches_reference
    write_config(tmp_path, **TINY_LLAMA)
    scenario = tmp_path / "s.toml"
    text = (f'[run]\nsteps = 2\n[machine]\ntype = "ipu"\ntiles = 16\ngemm_block = 16\ntile_sram_kib = 4096\n'
            f'[workload]\ntype = "transformer"\nmodel_config = "config.json"\nbatch = 4\ntraining = true\n'
            f'tensor_parallel = {tp}\n')
    scenario.write_text(text)
    sc = load_scenario(scenario)
    assert (sc.values["workload"]["n_kv_heads"], sc.values["workload"]["mlp"]) == (2, "gated")
    assert simulate(sc.values)["cycles"] > 0
    assert_matches_reference(sc)


@pytest.mark.parametrize("machine", ["mesh", "rdu", "ipu"])
def test_every_machine_runs_a_model_from_a_config(tmp_path, machine):
    write_config(tmp_path, **TINY_LLAMA)
    workload = {"mesh": 'type = "layer_pipeline"\nseq_len = 8\nbatch = 1\n',
                "rdu": 'type = "transformer"\nbatch = 2\ntile_tokens = 32\n',
                "ipu": 'type = "transformer"\nbatch = 2\n'}[machine]
    mach = {"mesh": "rows = 24\ncols = 24\n", "rdu": 'preset = "sn10"\n', "ipu": "tiles = 64\n"}[machine]
    run = "cycles = 3000\n" if machine == "mesh" else ""
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'[run]\n{run}[machine]\ntype = "{machine}"\n{mach}[workload]\nmodel_config = '
                        f'"config.json"\n{workload}')
    sc = load_scenario(scenario)
    result = run_scenario(sc, tmp_path / f"{machine}.h5", progress=False)
    assert result.path.name == f"{machine}.h5" and result.summary["cycles"] > 0 and result.summary["completed"] > 0
    w = sc.values["workload"]
    assert (w["hidden_size"], w["n_kv_heads"], w["ffn_width"], w["mlp"], w["bias"]) == (64, 2, 96, "gated", False)


def test_grouped_query_attention_and_the_gated_mlp_move_the_rdu_step(tmp_path):
    """README, "The RDU dataflow machine": Mistral 7B's 8 key and value heads do fewer FLOPs, move fewer
    DDR bytes and take less time than 32 would."""
    scenario = ROOT / "scenarios" / "rdu_mistral_7b.toml"

    def summary(*overrides):
        sc = load_scenario(scenario, ["workload.n_layers=2", *overrides])
        return run_scenario(sc, tmp_path / "r.h5", progress=False).summary

    gqa, mha = summary(), summary("workload.n_kv_heads=32")
    assert gqa["ddr_bytes"] < mha["ddr_bytes"] and gqa["step_seconds"] < mha["step_seconds"]
    assert gqa["flops"] < mha["flops"]


def test_config_edge_cases_follow_the_transformers_library_or_are_refused(tmp_path):
    no_kv = {k: v for k, v in TINY_LLAMA.items() if k != "num_key_value_heads"}
    write_config(tmp_path, **no_kv, dtype="float16")
    scenario = tmp_path / "s.toml"
    scenario.write_text(ipu_with("config.json"))
    w = load_scenario(scenario, ["workload.n_heads=2"]).values["workload"]
    # absent key-value heads mean as many as the query heads, whatever n_heads the scenario sets; dtype
    # is read as newer configs write it
    assert (w["n_heads"], w["n_kv_heads"], w["precision"]) == (2, 0, "fp16")
    write_config(tmp_path, **TINY_LLAMA, head_dim=32)
    [p] = problems_of(tmp_path, ipu_with("config.json"))
    assert "head_dim = 32" in p and "64 / 4" in p
    write_config(tmp_path, **TINY_LLAMA, mlp_bias=True)
    [p] = problems_of(tmp_path, ipu_with("config.json"))
    assert "attention_bias = false, mlp_bias = true" in p
    for bad in ({"model_type": ["llama"]}, {"architectures": [["LlamaForCausalLM"]]},
                {**TINY_LLAMA, "torch_dtype": [1]}):
        write_config(tmp_path, **bad)
        assert problems_of(tmp_path, ipu_with("config.json"))  # an error naming the field, not a traceback
    write_config(tmp_path, **{**TINY_LLAMA, "max_position_embeddings": 2_000_000})
    [p] = problems_of(tmp_path, ipu_with("config.json"))
    assert "its max_position_embeddings gives workload.seq_len = 2000000" in p

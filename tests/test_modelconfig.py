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
from meshsim.transformer import Model, describe_model, edge_operators, model_from_workload, model_parameters, operators

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "scenarios" / "models"

#: The published parameter counts of the shipped configs (scenarios/models/README.md): the weights
#: the transformers library reports for each checkpoint, embeddings and head included, and for the
#: Pythia suite the non-embedding count its paper tabulates.
PUBLISHED = {"gpt2": 124_439_808, "gpt2-xl": 1_557_611_200, "llama-2-7b": 6_738_415_616,
             "mistral-7b": 7_241_732_096, "qwen2-0.5b": 494_032_768, "phi-3-mini-4k": 3_821_079_552,
             "gemma-2b": 2_506_172_416, "gemma-7b": 8_537_680_896, "falcon-7b": 6_921_720_704,
             "opt-125m": 125_239_296, "pythia-160m": 162_322_944, "bert-base-uncased": 109_482_240,
             "bert-large-uncased": 335_141_888, "llama-3-8b": 8_030_261_248,
             "llama-3.1-8b": 8_030_261_248}
PUBLISHED_WITHOUT_EMBEDDINGS = {"pythia-160m": 85_056_000}


def values(text, *overrides, path=ROOT / "scenarios" / "x.toml"):
    return load_scenario(path, overrides, text=text).values


def rdu_with(config, extra=""):
    return f'[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\nmodel_config = "{config}"\n{extra}'


def ipu_with(config, extra=""):
    return f'[machine]\ntype = "ipu"\n[workload]\ntype = "transformer"\nmodel_config = "{config}"\n{extra}'


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_configs_give_the_published_parameter_counts(name):
    """The model a config gives has the checkpoint's parameters, every weight and bias counted: the
    blocks, the token and position tables, the final norm and an untied head."""
    w = values(rdu_with(f"models/{name}/config.json", "seq_len = 256\n"))["workload"]
    counts = model_parameters(model_from_workload(w), w["vocab_size"])
    assert counts["total"] == PUBLISHED[name]
    if name in PUBLISHED_WITHOUT_EMBEDDINGS:
        assert counts["without_embeddings"] == PUBLISHED_WITHOUT_EMBEDDINGS[name]
    # the published count is the model's, whatever sequence length the run chooses
    again = values(rdu_with(f"models/{name}/config.json", "seq_len = 128\n"))["workload"]
    assert model_parameters(model_from_workload(again), again["vocab_size"]) == counts


def test_configs_fill_the_shape_and_gqa_and_the_gated_mlp():
    w = values(ipu_with("models/mistral-7b/config.json"))["workload"]
    assert {k: w[k] for k in ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "seq_len", "ffn_width", "mlp",
                              "bias", "vocab_size", "precision", "norm", "positions", "tied_head")} == dict(
        hidden_size=4096, n_layers=32, n_heads=32, n_kv_heads=8, seq_len=32768, ffn_width=14336, mlp="gated",
        bias=False, vocab_size=32000, precision="bf16", norm="rmsnorm", positions="rotary", tied_head=False)
    w = values(ipu_with("models/gpt2-xl/config.json"))["workload"]
    assert (w["hidden_size"], w["n_layers"], w["n_heads"], w["n_kv_heads"], w["ffn_width"], w["mlp"], w["bias"],
            w["max_positions"], w["tied_head"]) == (1600, 48, 25, 0, 6400, "gelu", True, 1024, True)


def test_each_family_gives_its_architecture():
    """What each family's documented architecture adds: Qwen2's QKV biases, Gemma's heads of 256 and
    GeGLU, Falcon's multi-query attention and shared norm, OPT's ReLU and its position table of
    max_position_embeddings + 2 rows, GPT-NeoX's biases and untied head."""
    def w(name):
        return values(rdu_with(f"models/{name}/config.json", "seq_len = 128\n"))["workload"]

    q = w("qwen2-0.5b")
    assert (q["bias"], q["qkv_bias"], q["n_kv_heads"], q["tied_head"]) == (False, True, 2, True)
    g = w("gemma-7b")
    assert (g["head_dim"], g["mlp"], g["norm"], g["tied_head"]) == (256, "geglu", "rmsnorm", True)
    assert model_from_workload(g).attention_size == 4096 != g["hidden_size"]
    f = w("falcon-7b")
    assert (f["n_kv_heads"], f["shared_norm"], f["bias"], f["ffn_width"], f["positions"]) == (
        1, True, False, 4 * 4544, "rotary")
    assert "layer0.ln2" not in {o.name for o in operators(model_from_workload(f))}
    o = w("opt-125m")
    assert (o["mlp"], o["bias"], o["positions"], o["max_positions"], o["precision"]) == (
        "relu", True, "learned", 2050, "fp16")
    n = w("pythia-160m")
    assert (n["bias"], n["tied_head"], n["positions"], n["mlp"]) == (True, False, "rotary", "gelu")
    p = w("phi-3-mini-4k")
    assert (p["mlp"], p["bias"], p["qkv_bias"], p["n_kv_heads"]) == ("gated", False, False, 32)


def test_the_config_is_the_model_and_an_override_is_said():
    # the run's own choices: sequence length and precision
    text = ipu_with("models/llama-2-7b/config.json", "seq_len = 512\nprecision = \"bf16\"\n")
    w = values(text)["workload"]
    assert (w["seq_len"], w["precision"], w["hidden_size"]) == (512, "bf16", 4096)
    # a scenario file that says another shape is refused, naming both
    with pytest.raises(InputError) as err:
        values(ipu_with("models/llama-2-7b/config.json", "n_layers = 4\nffn_multiplier = 2\n"))
    assert len(err.value.problems) == 2
    assert "workload.n_layers = 4: contradicts" in err.value.problems[0]
    assert "num_hidden_layers gives 32" in err.value.problems[0] and "on the command line" in err.value.problems[0]
    assert "workload.ffn_multiplier = 2: contradicts" in err.value.problems[1]
    assert "intermediate_size gives 11008" in err.value.problems[1]
    # the same values are no contradiction
    assert values(ipu_with("models/llama-2-7b/config.json", "n_layers = 32\nn_heads = 32\n"))
    # on the command line it wins, and the scenario says so
    sc = load_scenario(ROOT / "scenarios" / "x.toml", ["workload.n_layers=4", "workload.ffn_multiplier=2"],
                       text=ipu_with("models/llama-2-7b/config.json"))
    w = sc.values["workload"]
    assert (w["n_layers"], w["ffn_width"], model_from_workload(w).ffn_size) == (4, 0, 8192)
    notes = "\n".join(sc.model_notes)
    assert "workload.n_layers = 4: overridden on the command line" in notes and "num_hidden_layers gives 32" in notes
    assert "workload.ffn_multiplier = 2: overridden" in notes
    assert "workload.seq_len = 4,096: from the config's max_position_embeddings" in notes
    assert not load_scenario(ROOT / "scenarios" / "x.toml", text=ipu_with("models/llama-2-7b/config.json",
                                                                          "seq_len = 512\n")).model_notes


def test_the_model_is_printed_by_validate_run_and_report_and_kept_in_the_file(tmp_path):
    import io
    from contextlib import redirect_stdout

    from meshsim.cli import main
    from meshsim.report import read_summary

    scenario = ROOT / "scenarios" / "rdu_mistral_7b.toml"
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["validate", str(scenario), "workload.model_config=models/llama-2-7b/config.json"]) == 0
    assert "model         6.74 B (6,738,415,616) parameters (6.48 B (6,476,271,616) without embeddings)" in \
        out.getvalue()
    result = tmp_path / "r.h5"
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["run", str(scenario), "workload.n_layers=2", "-o", str(result)]) == 0
    assert "workload.n_layers = 2: overridden on the command line" in out.getvalue()
    root, _ = read_summary(result)
    assert root["model_parameters"] == 7_241_732_096 - 30 * 218_112_000  # 30 of the 32 blocks left out
    assert "2 layers, H 4,096, 32 heads of 128 (8 key-value)" in root["model"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(result)]) == 0
    assert root["model"] in out.getvalue()


def test_an_rdu_takes_the_configs_vocabulary_and_the_resolved_scenario_loads_again():
    text = ('[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\nmodel_config = '
            '"models/llama-2-7b/config.json"\nseq_len = 1024\n')
    sc = load_scenario(ROOT / "scenarios" / "x.toml", text=text)
    assert sc.values["workload"]["vocab_size"] == 32000  # the config's vocabulary, for the rdu's head
    assert sc.values["workload"]["hidden_size"] == 4096
    # the resolved form sets every key, so the config is not read again (it may be elsewhere by then)
    again = load_scenario(Path("/nonexistent/elsewhere.toml"), text=sc.resolved_toml())
    assert again.values == sc.values
    # one written before the architecture keys lacks them: it still does not read its config, and
    # they take the defaults, the model such a file was run with
    new = ("head_dim", "norm", "qkv_bias", "shared_norm", "positions", "max_positions", "tied_head")
    older = "\n".join(line for line in sc.resolved_toml().splitlines() if line.split(" = ")[0] not in new)
    w = load_scenario(Path("/nonexistent/elsewhere.toml"), text=older).values["workload"]
    assert (w["hidden_size"], w["norm"], w["tied_head"]) == (4096, "layernorm", True)


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
    # the activation is named for what it computes: SiLU(gate) x up
    assert "gelu" not in gqa and "gelu" in mha
    assert (gqa["swiglu"].flops, gqa["swiglu"].input_bytes, gqa["swiglu"].output_bytes) == (
        5 * t * f, 4 * 2 * t * f, 4 * t * f)
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
    write_config(tmp_path, model_type="t5", hidden_size=768)
    [p] = problems_of(tmp_path, text)
    assert 'workload.model_config = "config.json"' in p and 'model_type = "t5"' in p
    assert "bert, falcon, gemma, gpt2, gpt_neox, llama, mistral, opt, phi3, qwen2" in p
    assert "set the model's shape by hand (workload.hidden_size" in p
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
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["T5Model"]}))
    [p] = problems_of(tmp_path, text)
    assert "model_type: missing" in p and "T5Model" in p


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


#: A small model of each family, with what its architecture adds: heads wider than H / A and GeGLU
#: (Gemma), multi-query attention and a shared norm (Falcon), QKV biases (Qwen2), ReLU and a learned
#: position table (OPT), biases and an untied head (GPT-NeoX).
TINY = {
    "gemma": dict(model_type="gemma", hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, intermediate_size=96, max_position_embeddings=64, vocab_size=100, hidden_act="gelu"),
    "falcon": dict(model_type="falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, multi_query=True,
                   parallel_attn=True, bias=False, alibi=False, vocab_size=100),
    "qwen2": dict(TINY_LLAMA, model_type="qwen2", tie_word_embeddings=True),
    "opt": dict(model_type="opt", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                max_position_embeddings=64, vocab_size=100, activation_function="relu"),
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=64, vocab_size=100, hidden_act="gelu"),
}


@pytest.mark.parametrize("family", sorted(TINY))
def test_the_ipu_kernel_matches_its_reference_on_each_family(tmp_path, family):
    """The operators of each family's architecture, as the ipu oracle reads them from docs/ipu.md."""
    from tests.test_ipu import assert_matches_reference
    write_config(tmp_path, **TINY[family])
    scenario = tmp_path / "s.toml"
    tp = 1 if family == "falcon" else 2  # Falcon's one key-value head is not split
    scenario.write_text('[run]\nsteps = 2\n[machine]\ntype = "ipu"\ntiles = 16\ngemm_block = 16\n'
                        'tile_sram_kib = 4096\n[workload]\ntype = "transformer"\nmodel_config = "config.json"\n'
                        f'seq_len = 32\nbatch = 4\ntraining = true\ntensor_parallel = {tp}\n')
    assert_matches_reference(load_scenario(scenario))


@pytest.mark.parametrize("family", sorted(TINY))
def test_the_rdu_and_the_mesh_run_each_family(tmp_path, family):
    write_config(tmp_path, **TINY[family])
    for machine, text in (("rdu", '[machine]\ntype = "rdu"\npreset = "sn10"\n[workload]\ntype = "transformer"\n'
                                  'seq_len = 32\nbatch = 2\ntile_tokens = 32\n'),
                          ("mesh", '[run]\ncycles = 2000\n[machine]\ntype = "mesh"\nrows = 24\ncols = 24\n'
                                   '[workload]\ntype = "layer_pipeline"\nseq_len = 8\nbatch = 1\n')):
        scenario = tmp_path / f"{machine}.toml"
        scenario.write_text(text + 'model_config = "config.json"\n')
        result = run_scenario(load_scenario(scenario), tmp_path / f"{machine}.h5", progress=False)
        assert result.summary["completed"] > 0


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
    """docs/guide.md, "The RDU dataflow machine": Mistral 7B's 8 key and value heads do fewer FLOPs, move fewer
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
    write_config(tmp_path, **TINY_LLAMA, head_dim=32)  # heads wider than hidden_size / heads, as Gemma 7B's
    w = load_scenario(scenario).values["workload"]
    assert (w["head_dim"], model_from_workload(w).attention_size) == (32, 128)
    # a mixture of experts is refused by its fields, whatever family it claims
    write_config(tmp_path, **TINY_LLAMA, num_local_experts=8, num_experts_per_tok=2)
    [p] = problems_of(tmp_path, ipu_with("config.json"))
    assert "num_local_experts = 8: a mixture of experts" in p and "dense MLPs only" in p
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


def test_a_bert_encoder_counts_its_token_types_and_its_pooler(tmp_path):
    # BERT: post-norm blocks of GPT-2's operators, a token-type table of type_vocab_size rows beside
    # the learned positions, and a pooler on each sequence's first token (109,482,240 above)
    config = "models/bert-base-uncased/config.json"
    w = values(rdu_with(config))["workload"]
    assert (w["token_types"], w["pooler"], w["max_positions"], w["seq_len"], w["mlp"]) == (2, True, 512, 512, "gelu")
    model = model_from_workload(w)
    first, last = edge_operators(model, w["vocab_size"])
    assert first[0].weight_bytes == (30522 + 512 + 2) * 768 * 2
    pooler = next(op for op in last if op.name == "head.pooler")
    assert (pooler.flops, pooler.weight_bytes) == (2 * w["batch"] * 768 * 768, (768 * 768 + 768) * 2)
    assert "2 token types" in describe_model(model, w["vocab_size"]) and ", pooler," in describe_model(model, 30522)
    # a decoder's config gives neither, so a scenario file may not add them to it
    with pytest.raises(InputError, match="pooler"):
        values(rdu_with("models/gpt2/config.json", "pooler = true"))
    write_config(tmp_path, model_type="bert", hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=16, vocab_size=10,
                 position_embedding_type="relative_key")
    [p] = problems_of(tmp_path, ipu_with("config.json"))
    assert 'position_embedding_type = "relative_key"' in p and "absolute" in p

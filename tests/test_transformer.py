"""The transformer operator list (meshsim/transformer.py) on models whose figures are worked out by hand."""

import pytest

from meshsim import transformer
from meshsim.errors import InputError
from meshsim.transformer import Model, backward_of, edge_operators, edge_parameter_count, parameter_count


def tiny_model(n_layers=2):
    """H = 4, A = 2, S = 3, B = 2, F = 4 x 4 = 16, fp32 (e = 4): T = 2 x 3 = 6 tokens."""
    return Model(hidden_size=4, n_layers=n_layers, n_heads=2, seq_len=3, batch=2, ffn_multiplier=4, precision="fp32")


def gpt2_small(**overrides):
    shape = dict(hidden_size=768, n_layers=12, n_heads=12, seq_len=1024, batch=1)
    shape.update(overrides)
    return Model(**shape)


def by_name(ops):
    return {op.name: op for op in ops}


# (name, kind, flops, weight_bytes, input_bytes, output_bytes) of one layer of tiny_model(), worked
# out from T = 6, H = 4, A = 2, S = 3, B = 2, F = 16, e = 4; each figure is elements x 4 bytes.
TINY_LAYER = [
    ("ln1", "norm", 8 * 6 * 4, 2 * 4 * 4, 6 * 4 * 4, 6 * 4 * 4),  # 192, 32, 96, 96
    ("qkv_proj", "gemm", 2 * 6 * 4 * 12, (12 * 4 + 12) * 4, 6 * 4 * 4, 3 * 6 * 4 * 4),  # 576, 240, 96, 288
    # Q K^T 2 B S S H = 2*2*3*3*4 = 144, softmax 5 B A S S = 5*2*2*3*3 = 180; out B A S S = 36 scores
    ("attn_scores_softmax", "attention", 144 + 180, 0, 2 * 6 * 4 * 4, 2 * 2 * 3 * 3 * 4),  # 324, 0, 192, 144
    ("attn_v", "attention", 2 * 2 * 3 * 3 * 4, 0, (36 + 24) * 4, 6 * 4 * 4),  # 144, 0, 240, 96
    ("out_proj", "gemm", 2 * 6 * 4 * 4, (4 * 4 + 4) * 4, 6 * 4 * 4, 6 * 4 * 4),  # 192, 80, 96, 96
    ("residual1", "elementwise", 6 * 4, 0, 2 * 6 * 4 * 4, 6 * 4 * 4),  # 24, 0, 192, 96
    ("ln2", "norm", 8 * 6 * 4, 2 * 4 * 4, 6 * 4 * 4, 6 * 4 * 4),  # 192, 32, 96, 96
    ("ffn_up", "gemm", 2 * 6 * 4 * 16, (4 * 16 + 16) * 4, 6 * 4 * 4, 6 * 16 * 4),  # 768, 320, 96, 384
    ("gelu", "elementwise", 8 * 6 * 16, 0, 6 * 16 * 4, 6 * 16 * 4),  # 768, 0, 384, 384
    ("ffn_down", "gemm", 2 * 6 * 16 * 4, (16 * 4 + 4) * 4, 6 * 16 * 4, 6 * 4 * 4),  # 768, 272, 384, 96
    ("residual2", "elementwise", 6 * 4, 0, 2 * 6 * 4 * 4, 6 * 4 * 4),  # 24, 0, 192, 96
]


def test_tiny_model_properties():
    m = tiny_model()
    assert (m.head_size, m.ffn_size, m.tokens, m.element_bytes) == (2, 16, 6, 4)


def test_tiny_model_every_operator_matches_the_hand_count():
    ops = transformer.operators(tiny_model(n_layers=2))
    assert len(ops) == 2 * 11
    expected = [
        (f"layer{layer}.{name}", layer, kind, "forward", flops, w, i, o)
        for layer in range(2)
        for name, kind, flops, w, i, o in TINY_LAYER
    ]
    got = [
        (op.name, op.layer, op.kind, op.phase, op.flops, op.weight_bytes, op.input_bytes, op.output_bytes) for op in ops
    ]
    assert got == expected


def test_tiny_model_totals_are_the_sums_of_the_hand_counts():
    t = transformer.totals(transformer.operators(tiny_model(n_layers=2)))
    # per layer: 192+576+324+144+192+24+192+768+768+768+24 = 3972 FLOPs
    # weights 32+240+80+32+320+272 = 976 bytes; moved 976 + inputs 2064 + outputs 1872 = 4912 bytes
    assert t == dict(
        flops=2 * 3972, forward_flops=2 * 3972, backward_flops=0, weight_bytes=2 * 976, bytes_moved=2 * 4912
    )


def test_operator_bytes_moved_and_arithmetic_intensity():
    qkv = by_name(transformer.operators(tiny_model()))["layer0.qkv_proj"]
    assert qkv.bytes_moved == 240 + 96 + 288 == 624
    assert qkv.arithmetic_intensity == 576 / 624


def test_gpt2_small_parameter_count():
    """Per layer, with F = 4H: qkv 3H^2 + 3H, out_proj H^2 + H, ffn_up 4H^2 + 4H, ffn_down 4H^2 + H and two
    LayerNorms 2H each (scale and shift) = 12 H^2 + 13 H. With H = 768 and 12 layers:
    12 x (12 x 589,824 + 9,984) = 12 x 7,087,872 = 85,054,464 (embeddings and head not counted).
    """
    m = gpt2_small()
    assert transformer.parameter_count(m) == 12 * (12 * 768 * 768 + 13 * 768) == 85_054_464
    assert transformer.weight_bytes(m) == 2 * 85_054_464
    assert transformer.weight_bytes(gpt2_small(precision="fp8")) == 85_054_464


def test_parameter_count_equals_the_forward_operators_weights():
    m = gpt2_small(precision="fp32")
    assert transformer.totals(transformer.operators(m))["weight_bytes"] == 4 * transformer.parameter_count(m)


def test_forward_gemm_flops_are_two_per_token_per_gemm_weight():
    m = gpt2_small(batch=3, seq_len=128)
    h, f = 768, 4 * 768
    gemm_weights = 12 * (3 * h * h + h * h + h * f + f * h)  # qkv, out, ffn_up, ffn_down without biases
    gemm_flops = sum(op.flops for op in transformer.operators(m) if op.kind == "gemm")
    assert gemm_flops == 2 * (3 * 128) * gemm_weights == 2 * 384 * 84_934_656


def test_training_appends_backward_operators_in_reverse_order():
    m = tiny_model(n_layers=2)
    forward = transformer.operators(m)
    ops = transformer.operators(m, training=True)
    assert ops[: len(forward)] == forward
    backward = ops[len(forward) :]
    assert [op.name for op in backward] == [op.name + ".backward" for op in reversed(forward)]
    assert backward[0].name == "layer1.residual2.backward" and backward[-1].name == "layer0.ln1.backward"
    assert {op.phase for op in backward} == {"backward"}


def test_backward_operators_follow_the_stated_assumptions():
    ops = by_name(transformer.operators(tiny_model(n_layers=1), training=True))
    # gemm: 2x FLOPs; reads weights 320, output gradient 384 + saved input 96; writes input gradient 96
    # + weight gradient 320
    up = ops["layer0.ffn_up.backward"]
    assert (up.kind, up.flops, up.weight_bytes, up.input_bytes, up.output_bytes) == ("gemm", 1536, 320, 480, 416)
    # attention: 2x FLOPs, no weights; reads output gradient 144 + Q, K 192; writes gradient of Q, K 192
    sc = ops["layer0.attn_scores_softmax.backward"]
    assert (sc.flops, sc.weight_bytes, sc.input_bytes, sc.output_bytes) == (648, 0, 336, 192)
    # norm: 1x FLOPs; writes input gradient 96 + scale and shift gradient 32
    ln = ops["layer0.ln1.backward"]
    assert (ln.flops, ln.weight_bytes, ln.input_bytes, ln.output_bytes) == (192, 32, 192, 128)
    # elementwise: 1x FLOPs; reads output gradient 96 + both inputs 192; writes both input gradients 192
    res = ops["layer0.residual1.backward"]
    assert (res.flops, res.weight_bytes, res.input_bytes, res.output_bytes) == (24, 0, 288, 192)


def test_training_gemm_flops_are_three_times_forward():
    ops = transformer.operators(gpt2_small(batch=2, seq_len=256), training=True)
    forward = sum(op.flops for op in ops if op.kind == "gemm" and op.phase == "forward")
    total = sum(op.flops for op in ops if op.kind == "gemm")
    assert total == 3 * forward
    t = transformer.totals(ops)
    assert t["flops"] == t["forward_flops"] + t["backward_flops"]
    assert t["weight_bytes"] == 2 * transformer.weight_bytes(gpt2_small())  # read once per phase


def test_gemm_arithmetic_intensity_grows_with_batch():
    for op_name in ("layer0.qkv_proj", "layer0.out_proj", "layer0.ffn_up", "layer0.ffn_down"):
        intensity = [
            by_name(transformer.operators(gpt2_small(n_layers=1, seq_len=16, batch=b)))[op_name].arithmetic_intensity
            for b in (1, 2, 4, 8, 64)
        ]
        assert intensity == sorted(intensity) and len(set(intensity)) == 5, op_name


def test_bad_model_lists_every_problem_at_once():
    with pytest.raises(InputError) as err:
        Model(hidden_size=0, n_layers=-1, n_heads=2, seq_len=1.5, batch=True, ffn_multiplier=4, precision="bf17")
    assert err.value.problems == [
        "model.hidden_size = 0: must be an integer >= 1",
        "model.n_layers = -1: must be an integer >= 1",
        "model.seq_len = 1.5: must be an integer >= 1",
        "model.batch = True: must be an integer >= 1",
        "model.precision = 'bf17': must be one of bf16, fp16, fp32, fp8, tf32",
    ]


def test_hidden_size_not_a_multiple_of_heads_is_an_error():
    with pytest.raises(InputError) as err:
        Model(hidden_size=10, n_layers=1, n_heads=3, seq_len=1, batch=1, ffn_multiplier=0)
    assert err.value.problems == [
        "model.ffn_multiplier = 0: must be an integer >= 1",
        "model.hidden_size = 10: must be a multiple of model.n_heads = 3 "
        "(head_dim = hidden_size / n_heads must be a whole number)",
    ]


def test_gpt2_small_weights_fit_the_wafer():
    fits, message = transformer.mesh_weight_fit(gpt2_small(), n_pes=850_000, sram_kib=48)
    assert fits
    assert "170,108,928 bytes" in message  # 85,054,464 x 2 bytes bf16
    assert "41,779,200,000 bytes" in message  # 850,000 x 48 x 1024
    assert "fraction used 0.004072" in message and message.endswith(": fits")
    assert "weight streaming" not in message


def test_7b_class_weights_fit_the_whole_wafer_but_not_a_quarter():
    # 32 x (12 x 4096^2 + 13 x 4096) = 6,444,154,880 parameters = 12,888,309,760 bytes in bf16: 31% of the
    # wafer's 41,779,200,000 bytes, so weights alone fit; on a quarter of it (10,444,800,000 bytes) they do not.
    m = Model(hidden_size=4096, n_layers=32, n_heads=32, seq_len=2048, batch=1)
    assert transformer.parameter_count(m) == 6_444_154_880
    assert transformer.mesh_weight_fit(m, n_pes=850_000, sram_kib=48)[0]
    fits, message = transformer.mesh_weight_fit(m, n_pes=212_500, sram_kib=48)
    assert not fits
    assert "12,888,309,760 bytes" in message and "10,444,800,000 bytes" in message
    assert "fraction used 1.234" in message
    assert "weight streaming" in message and "402,759,680 bytes per layer" in message


def test_175b_class_weights_do_not_fit_the_wafer_and_suggest_weight_streaming():
    # 96 x (12 x 12288^2 + 13 x 12288) = 173,961,510,912 parameters = 347,923,021,824 bytes in bf16.
    m = Model(hidden_size=12288, n_layers=96, n_heads=96, seq_len=2048, batch=1)
    fits, message = transformer.mesh_weight_fit(m, n_pes=850_000, sram_kib=48)
    assert not fits
    assert "347,923,021,824 bytes" in message and "fraction used 8.328" in message
    assert "use weight streaming (hold the weights off-chip and stream them in layer by layer" in message


def test_mesh_weight_fit_rejects_a_bad_mesh():
    with pytest.raises(InputError) as err:
        transformer.mesh_weight_fit(tiny_model(), n_pes=0, sram_kib=-48)
    assert err.value.problems == ["n_pes = 0: must be an integer >= 1", "sram_kib = -48: must be an integer >= 1"]


def test_the_whole_step_adds_the_embedding_head_and_loss_by_their_hand_counts():
    # T = 2 x 16 = 32 tokens, H = 32, S = 16, V = 100, bf16 (e = 2)
    m = Model(hidden_size=32, n_layers=2, n_heads=2, seq_len=16, batch=2)
    first, last = edge_operators(m, 100)
    got = {op.name: (op.layer, op.kind, op.flops, op.weight_bytes, op.input_bytes, op.output_bytes)
           for op in first + last}
    assert got == {
        "embedding.lookup": (-1, "elementwise", 32 * 32, (100 + 16) * 32 * 2, 4 * 32, 32 * 32 * 2),
        "head.final_norm": (2, "norm", 8 * 32 * 32, 2 * 32 * 2, 32 * 32 * 2, 32 * 32 * 2),
        "head.logits": (2, "gemm", 2 * 32 * 32 * 100, 100 * 32 * 2, 32 * 32 * 2, 32 * 100 * 2),
        "head.loss": (2, "elementwise", 5 * 32 * 100, 0, 32 * 100 * 2 + 4 * 32, 32 * 100 * 2),
    }
    # the embedding's backward writes the gradient of the rows it read, the token ids having none; the
    # loss's reads the softmax it kept and the targets and writes the logits' gradient; the head's is a GEMM's
    emb, loss = backward_of(first[0]), backward_of(last[2])
    assert (emb.input_bytes, emb.output_bytes, emb.flops) == (32 * 32 * 2, 32 * 32 * 2, 32 * 32)
    assert (loss.input_bytes, loss.output_bytes, loss.flops) == (32 * 100 * 2 + 4 * 32, 32 * 100 * 2, 5 * 32 * 100)
    assert backward_of(last[1]).flops == 2 * last[1].flops
    assert backward_of(last[1]).output_bytes == 32 * 32 * 2 + 100 * 32 * 2  # input gradient + weight gradient
    assert edge_operators(m, 0) == ([], [])
    # GPT-2 small: the head holds as many weights as about five and a half blocks; tied, counted once
    gpt2 = Model(hidden_size=768, n_layers=12, n_heads=12, seq_len=1024, batch=1)
    assert 5.4 < 50257 * 768 / (parameter_count(gpt2) / 12) < 5.5
    assert parameter_count(gpt2) + edge_parameter_count(gpt2, 50257) == 124_439_808  # GPT-2 small, 124M


def test_a_step_with_a_key_value_cache_attends_to_the_cached_keys_too():
    # B = 2 sequences, S = 1 new token each after c = 7 cached: L = 8 keys; H = D = K = 64, A = 4, e = 2
    decode = by_name(transformer.operators(Model(hidden_size=64, n_layers=1, n_heads=4, seq_len=1, batch=2,
                                                 context=7)))
    scores, values = decode["layer0.attn_scores_softmax"], decode["layer0.attn_v"]
    assert scores.flops == 2 * 2 * 1 * 8 * 64 + 5 * 2 * 4 * 1 * 8  # 2 B S L D + 5 B A S L
    assert (scores.input_bytes, scores.output_bytes) == (2 * (2 * 64 + 2 * 8 * 64), 2 * (2 * 4 * 1 * 8))
    assert (values.flops, values.input_bytes) == (2 * 2 * 1 * 8 * 64, 2 * (2 * 4 * 8 + 2 * 8 * 64))
    # the cached keys (and values) come from memory: B c K e bytes each
    model = Model(hidden_size=64, n_layers=1, n_heads=4, seq_len=1, batch=2, context=7)
    assert transformer.cached_kv_bytes(model, "layer0.attn_scores_softmax") == 2 * 7 * 64 * 2
    assert transformer.cached_kv_bytes(model, "layer0.attention") == 2 * 2 * 7 * 64 * 2  # o3's fused pair
    assert transformer.cached_kv_bytes(model, "layer0.qkv_proj") == 0
    # the projections and the MLP see the step's new tokens alone
    assert decode["layer0.qkv_proj"].flops == 2 * 2 * 64 * 192
    # without a cache, every operator is as before
    assert transformer.operators(gpt2_small(context=0)) == transformer.operators(gpt2_small())
    with pytest.raises(InputError, match="context"):
        gpt2_small(context=-1)

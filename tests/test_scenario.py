"""Scenario loading, overrides and validation (docs/design.md, "Scenario files"; meshsim/scenario.py,
params.py).

Every bad-input test asserts on the message: the key path, the bad value and what is allowed.
"""

from __future__ import annotations

import tomllib

import pytest

from meshsim.docs import END_MARKER, START_MARKER, parameter_reference_markdown, update_file
from meshsim.errors import InputError
from meshsim.params import PARAMS, TYPES, param, sections
from meshsim.scenario import (
    Scenario,
    default_hot_region,
    load_scenario,
    parse_overrides,
    scenario_from_dict,
)


def problems_of(text, overrides=(), path="s.toml"):
    """The problems load_scenario reports for `text` (fails if it reports none)."""
    with pytest.raises(InputError) as caught:
        load_scenario(path, overrides, text=text)
    return caught.value.problems


def only_problem(text, overrides=(), path="s.toml"):
    problems = problems_of(text, overrides, path)
    assert len(problems) == 1, problems
    return problems[0]


# ---------------------------------------------------------------------------------------------
# Defaults, overrides, resolved form


def test_an_empty_scenario_resolves_every_key_to_its_default_in_table_order():
    s = load_scenario("runs/empty.toml", text="")
    assert list(s.values) == list(sections())
    for section in sections():
        assert list(s.values[section]) == [p.name for p in PARAMS if p.section == section]
    for p in PARAMS:
        assert s.get(p.section, p.name) == p.default_value()
    assert s.get("machine", "rows") == 757
    assert s.get("machine", "cols") == 996
    assert s.get("workload", "hot_regions") == []


def test_keys_in_the_file_replace_defaults_and_the_rest_keep_theirs():
    s = load_scenario("x.toml", text="[machine]\nrows = 8\ncols = 12\n[run]\ncycles = 50\n")
    assert s.get("machine", "rows") == 8
    assert s.get("machine", "cols") == 12
    assert s.get("run", "cycles") == 50
    assert s.get("run", "seed") == 1
    assert s.get("migration", "policy") == "least_loaded"


def test_a_float_key_given_an_integer_resolves_to_a_float():
    s = load_scenario("x.toml", text="[workload]\ninjection_rate = 1\n")
    value = s.get("workload", "injection_rate")
    assert value == 1.0 and isinstance(value, float)


def test_source_text_is_kept_verbatim():
    text = "# my run\n[run]\ncycles = 7   # short\n"
    assert load_scenario("x.toml", text=text).source_text == text


def test_load_scenario_reads_the_file_from_disk(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text("[machine]\nrows = 3\n", encoding="utf-8")
    s = load_scenario(path)
    assert s.get("machine", "rows") == 3
    assert s.path == str(path)
    assert s.source_text == "[machine]\nrows = 3\n"


def test_name_is_run_name_else_file_stem_else_scenario():
    assert load_scenario("dir/hot_spot.toml", text="").name == "hot_spot"
    assert load_scenario("dir/x.toml", text='[run]\nname = "mine"\n').name == "mine"
    assert load_scenario(None, text="").name == "scenario"
    assert scenario_from_dict({}).name == "scenario"


def test_overrides_win_over_the_file_and_are_recorded():
    s = load_scenario(
        "x.toml",
        ["machine.rows=64", "migration.policy=none", "workload.injection_rate=0.2"],
        text="[machine]\nrows = 8\n[migration]\npolicy = \"random_lower\"\n",
    )
    assert s.get("machine", "rows") == 64
    assert s.get("migration", "policy") == "none"
    assert s.get("workload", "injection_rate") == 0.2
    assert s.overrides == [
        ("machine.rows", 64),
        ("migration.policy", "none"),
        ("workload.injection_rate", 0.2),
    ]


def test_overrides_may_be_given_as_key_value_pairs():
    s = load_scenario("x.toml", [("machine.rows", 5), ("run.seed", 9)], text="")
    assert s.get("machine", "rows") == 5
    assert s.get("run", "seed") == 9
    assert s.overrides == [("machine.rows", 5), ("run.seed", 9)]


def test_a_later_override_of_the_same_key_wins():
    s = load_scenario("x.toml", ["machine.rows=5", "machine.rows=6"], text="")
    assert s.get("machine", "rows") == 6


def test_parse_overrides_reads_toml_values_and_falls_back_to_bare_strings():
    pairs = parse_overrides([
        "machine.rows=64",
        "workload.injection_rate=0.25",
        "workload.hot_regions=[[0, 0, 4, 4]]",
        "migration.policy=none",
        'run.name="two words"',
        "run.name = spaced ",
        "run.name=",
    ])
    assert pairs == [
        ("machine.rows", 64),
        ("workload.injection_rate", 0.25),
        ("workload.hot_regions", [[0, 0, 4, 4]]),
        ("migration.policy", "none"),
        ("run.name", "two words"),
        ("run.name", "spaced"),
        ("run.name", ""),
    ]
    assert type(pairs[0][1]) is int


def test_parse_overrides_does_not_let_a_value_smuggle_in_other_keys():
    assert parse_overrides(["run.name=1\nx = 2"]) == [("run.name", "1\nx = 2")]


def test_parse_overrides_reports_every_malformed_item():
    with pytest.raises(InputError) as caught:
        parse_overrides(["rows64", "rows=64", "machine.rows=64", ".x=1"])
    problems = caught.value.problems
    assert len(problems) == 3
    assert problems[0].startswith("override rows64: expected section.key=value")
    assert problems[1].startswith('override rows=64: the key "rows" must be written section.key')
    assert problems[2].startswith("override .x=1:")


def test_resolved_toml_reads_back_to_the_same_values():
    s = load_scenario(
        "x.toml",
        ["workload.hot_regions=[[1, 2, 3, 4], [0, 0, 2, 2]]"],
        text='[workload]\ntype = "hotspot"\nhot_rate = 1\n[machine]\nrows = 10\ncols = 10\n',
    )
    back = tomllib.loads(s.resolved_toml())
    assert back == s.values
    assert back["workload"]["hot_regions"] == [[1, 2, 3, 4], [0, 0, 2, 2]]
    assert isinstance(back["workload"]["hot_rate"], float)
    # The resolved form is itself a valid scenario that resolves to the same values.
    again = load_scenario("resolved.toml", text=s.resolved_toml())
    assert again.values == s.values


def test_resolved_toml_writes_an_empty_region_list_as_an_empty_array():
    text = load_scenario("x.toml", text="").resolved_toml()
    assert "hot_regions = []" in text.splitlines()
    assert tomllib.loads(text) == load_scenario("x.toml", text="").values


def test_scenario_from_dict_validates_like_a_file():
    s = scenario_from_dict({"machine": {"rows": 4, "cols": 4}}, overrides=["run.cycles=9"])
    assert isinstance(s, Scenario)
    assert (s.get("machine", "rows"), s.get("run", "cycles")) == (4, 9)
    with pytest.raises(InputError) as caught:
        scenario_from_dict({"machine": {"rows": 0}}, path="sweep.toml")
    assert caught.value.problems == [
        "sweep.toml: machine.rows = 0: must be an integer in [1, 4096] (PEs)"
    ]


def test_get_of_a_key_not_in_the_table_raises_key_error():
    with pytest.raises(KeyError, match="machine.rowz"):
        load_scenario("x.toml", text="").get("machine", "rowz")


def test_hot_regions_default_to_one_centred_region_a_quarter_of_each_side():
    text = '[workload]\ntype = "hotspot"\n[machine]\nrows = 8\ncols = 12\n'
    s = load_scenario("x.toml", text=text)
    assert s.hot_regions() == [(3, 4, 5, 7)]
    assert default_hot_region(757, 996) == (284, 373, 473, 622)
    assert default_hot_region(1, 1) == (0, 0, 1, 1)


def test_window_longer_than_the_run_is_allowed():
    s = load_scenario("x.toml", text="[run]\ncycles = 10\nwindow_cycles = 100\n")
    assert s.get("run", "window_cycles") == 100


# ---------------------------------------------------------------------------------------------
# File-level problems


def test_a_missing_scenario_file_is_reported(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    assert caught.value.problems == [f"{path}: no such scenario file"]


def test_invalid_toml_is_the_only_problem_reported():
    problems = problems_of("[run]\ncycles = \n[wrkload]\n", overrides=["x.y=1"])
    assert len(problems) == 1
    assert problems[0].startswith("s.toml: invalid TOML: ")
    assert "line 2" in problems[0]


def test_a_section_that_is_not_a_table_is_reported():
    assert only_problem("run = 5\n") == (
        "s.toml: run = 5: must be a table, written as a [run] section"
    )


# ---------------------------------------------------------------------------------------------
# Unknown keys and sections


def test_a_misspelt_key_suggests_the_closest_key_of_its_section():
    assert only_problem("[workload]\ninjection_rat = 0.1\n") == (
        "s.toml: workload.injection_rat: unknown key; did you mean workload.injection_rate?"
    )


def test_a_key_in_the_wrong_section_suggests_the_right_section():
    assert only_problem("[run]\nthreshold = 3\n") == (
        "s.toml: run.threshold: unknown key; did you mean migration.threshold?"
    )


def test_an_unknown_key_with_no_close_match_lists_the_keys_of_its_section():
    assert only_problem("[run]\nxyzzy = 1\n") == (
        "s.toml: run.xyzzy: unknown key; the keys of [run] are "
        "name, seed, threads, cycles, window_cycles, steps"
    )


def test_a_misspelt_section_suggests_the_closest_section():
    assert only_problem("[wrkload]\ntype = \"uniform\"\n") == (
        "s.toml: [wrkload]: unknown section; did you mean [workload]?"
    )


def test_an_unknown_section_with_no_close_match_lists_the_sections():
    assert only_problem("[zzz]\na = 1\n") == (
        "s.toml: [zzz]: unknown section; the sections are "
        "[run], [machine], [migration], [workload], [output]"
    )


def test_a_key_outside_any_section_suggests_its_section():
    assert only_problem("cycles = 5\n") == (
        "s.toml: cycles = 5: keys belong in a section; did you mean run.cycles?"
    )


def test_an_override_of_an_unknown_key_names_the_override():
    assert only_problem("", overrides=["workload.injection_rat=0.1"]) == (
        "override workload.injection_rat=0.1: workload.injection_rat: unknown key; "
        "did you mean workload.injection_rate?"
    )
    assert only_problem("", overrides=["wrkload.type=uniform"]) == (
        "override wrkload.type=uniform: wrkload.type: unknown section; did you mean workload?"
    )


# ---------------------------------------------------------------------------------------------
# Types, ranges, choices


@pytest.mark.parametrize(
    "written",
    ["100.0", "true", '"100"', "[100]", "2.5"],
)
def test_an_integer_key_rejects_anything_but_a_toml_integer(written):
    problem = only_problem(f"[run]\ncycles = {written}\n")
    assert problem.startswith(f"s.toml: run.cycles = {written}: ")
    assert "must be an integer in [1, 100_000_000] (cycles)" in problem


def test_an_integral_float_for_an_integer_key_says_how_to_write_it():
    assert only_problem("[machine]\nrows = 100.0\n") == (
        "s.toml: machine.rows = 100.0: must be an integer in [1, 4096] (PEs); "
        "write 100 without a decimal point"
    )


def test_an_integer_out_of_range_names_the_range_and_unit():
    assert only_problem("[machine]\nhop_latency_cycles = 9\n") == (
        "s.toml: machine.hop_latency_cycles = 9: must be an integer in [1, 8] (cycles)"
    )


@pytest.mark.parametrize("written", ["1.5", "-0.1", "nan", "inf", "true", '"0.1"'])
def test_a_float_key_rejects_values_outside_its_range_and_non_numbers(written):
    assert only_problem(f"[workload]\ninjection_rate = {written}\n") == (
        f"s.toml: workload.injection_rate = {written}: must be a number in [0, 1] (tasks/PE/cycle)"
    )


def test_a_string_key_rejects_a_non_string():
    assert only_problem("[run]\nname = 5\n") == "s.toml: run.name = 5: must be a string"


def test_a_choice_outside_the_allowed_strings_suggests_the_closest():
    assert only_problem('[migration]\npolicy = "least"\n') == (
        's.toml: migration.policy = "least": must be one of "none", "least_loaded", '
        '"random_lower", "diffusion", "gradient", "work_stealing"; did you mean "least_loaded"?'
    )
    assert only_problem('[workload]\ntype = "hotspt"\n') == (
        's.toml: workload.type = "hotspt": must be one of "uniform", "hotspot", "skewed", '
        '"trace", "traffic", "layer_pipeline", "transformer", "decode"; did you mean "hotspot"?'
    )


def test_a_choice_with_no_close_match_lists_the_choices_only():
    assert only_problem('[machine]\ntype = "fpga"\n') == (
        's.toml: machine.type = "fpga": must be one of "mesh", "rdu", "ipu"'
    )


RDU = '[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\n'


@pytest.mark.parametrize("written, meant", [
    ("TP8", "T8P1D1"), ("PP4", "T1P4D1"), ("DP2", "T1P1D2"), ("TP8PP2", "T8P2D1"), ("tp=2 dp=4", "T2P1D4"),
    ("TP4_PP2_DP1", "T4P2D1"), ("t4p2d1", "T4P2D1"), ("T4P2", "T4P2D1"), ("tensor=2,pipeline=3", "T2P3D1"),
])
def test_parallelism_written_another_way_suggests_the_meshsim_spelling(written, meant):
    assert only_problem(RDU, [f"workload.parallelism={written}"]) == (
        f'override workload.parallelism={written}: workload.parallelism = "{written}": must be written '
        f'T<tensor>P<pipeline>D<data> with degrees >= 1; did you mean "{meant}"?'
    )


@pytest.mark.parametrize("written", ["EP4", "TP0", "TP2TP4", "8x2", "fsdp"])
def test_parallelism_with_no_sure_reading_gets_the_form_and_an_example(written):
    assert only_problem(RDU + f'parallelism = "{written}"\n') == (
        f's.toml: workload.parallelism = "{written}": must be written T<tensor>P<pipeline>D<data> with '
        'degrees >= 1, e.g. "T4P2D1"'
    )


@pytest.mark.parametrize("written, compute", [
    ("tf32+fp16", '"fp16"'), ("bf16+fp32", '"bf16"'), ("fp32/fp16", '"fp16"'), ("bf16-mixed", '"bf16"'),
    ("16-mixed", '"fp16"'), ("mixed", 'e.g. "bf16" (the default) or "fp16"'),
    ("amp", 'e.g. "bf16" (the default) or "fp16"'),
])
def test_mixed_precision_is_refused_with_the_single_type_that_stands_for_it(written, compute):
    assert only_problem(RDU + f'precision = "{written}"\n') == (
        f's.toml: workload.precision = "{written}": must be one of "fp32", "tf32", "bf16", "fp16", "fp8"; '
        'mixed precision is written as the compute precision here and workload.master_weights = "fp32" with an '
        f"optimizer (workload.optimizer): give the compute precision alone, {compute}"
    )


def test_a_misspelt_precision_still_gets_its_near_spelling():
    assert only_problem(RDU, ["workload.precision=FP16"]).endswith('must be one of "fp32", "tf32", "bf16", '
                                                                  '"fp16", "fp8"; did you mean "fp16"?')


def test_a_run_name_must_be_a_plain_file_name():
    assert only_problem('[run]\nname = "a/b"\n') == (
        's.toml: run.name = "a/b": must be a plain file name, without / or \\'
    )


def test_regions_must_be_lists_of_four_integers():
    problem = only_problem(
        '[workload]\ntype = "hotspot"\nhot_regions = [[0, 0, 2, 2], [1, 2, 3]]\n'
    )
    assert problem == (
        "s.toml: workload.hot_regions = [[0, 0, 2, 2], [1, 2, 3]]: must be a list of "
        "[row0, col0, row1, col1] lists of 4 integers (PEs); region 1 is [1, 2, 3]"
    )


def test_an_override_with_a_bad_value_names_the_override():
    assert only_problem("", overrides=["machine.rows=abc"]) == (
        'override machine.rows=abc: machine.rows = "abc": must be an integer in [1, 4096] (PEs)'
    )


# ---------------------------------------------------------------------------------------------
# Keys that apply only under a condition


def test_a_key_set_where_it_does_not_apply_is_an_error():
    assert only_problem("[workload]\nhot_rate = 0.7\n") == (
        's.toml: workload.hot_rate = 0.7: applies only when workload.type is "hotspot" '
        '(it is "uniform")'
    )


def test_a_conditional_key_names_the_outermost_unmet_condition():
    problems = problems_of(
        '[workload]\ntype = "trace"\ntrace_file = "t.csv"\nwork_min_cycles = 3\n'
    )
    assert (
        's.toml: workload.work_min_cycles = 3: applies only when workload.type is "uniform", '
        '"hotspot" or "skewed" (it is "trace")'
    ) in problems
    assert only_problem("[workload]\nwork_min_cycles = 3\n") == (
        's.toml: workload.work_min_cycles = 3: applies only when '
        'workload.work_distribution is "uniform" (it is "fixed")'
    )


def test_a_conditional_key_left_at_its_default_is_accepted_where_it_does_not_apply():
    s = load_scenario("x.toml", text="[workload]\nhot_rate = 0.5\nsigma = 1\n")
    assert s.get("workload", "hot_rate") == 0.5


def test_a_conditional_key_is_not_judged_against_an_invalid_condition_key():
    assert only_problem('[workload]\ntype = "hotsport"\nhot_rate = 0.7\n').startswith(
        's.toml: workload.type = "hotsport": must be one of'
    )


def test_conditional_keys_are_accepted_where_they_apply():
    s = load_scenario(
        "x.toml",
        text='[workload]\ntype = "skewed"\nsigma = 2\nwork_distribution = "geometric"\n'
        "work_cycles = 5\nwork_max_cycles = 50\n",
    )
    assert s.get("workload", "sigma") == 2.0
    assert s.get("workload", "work_max_cycles") == 50


# ---------------------------------------------------------------------------------------------
# Combinations


def test_threshold_must_be_below_queue_capacity():
    assert only_problem("[machine]\nqueue_capacity = 8\n[migration]\nthreshold = 8\n") == (
        "s.toml: migration.threshold = 8: must be less than machine.queue_capacity = 8, "
        "so an integer in [0, 7] (tasks)"
    )


def test_hysteresis_may_not_reach_below_an_empty_queue():
    assert only_problem("[migration]\nthreshold = 2\nhysteresis = 3\n") == (
        "s.toml: migration.hysteresis = 3: must be at most migration.threshold = 2 (the queue a shedding PE "
        "stops at is threshold - hysteresis), so an integer in [0, 2] (tasks)"
    )
    # with migration off, neither is compared with anything
    assert load_scenario("s.toml", text="[migration]\npolicy = \"none\"\nthreshold = 2\nhysteresis = 3\n")


def test_a_conflict_with_a_default_says_the_value_is_the_default():
    assert only_problem("", overrides=["machine.queue_capacity=4"]) == (
        "override machine.queue_capacity=4: migration.threshold = 4 (default): must be less than "
        "machine.queue_capacity = 4, so an integer in [0, 3] (tasks)"
    )


def test_link_buffer_must_hold_a_cycle_of_link_bandwidth():
    assert only_problem(
        "[machine]\nlink_messages_per_cycle = 3\nlink_buffer_messages = 2\n"
    ) == (
        "s.toml: machine.link_buffer_messages = 2: must be at least "
        "machine.link_messages_per_cycle = 3, so an integer in [3, 64] (messages)"
    )


def test_uniform_work_needs_min_at_most_max():
    assert only_problem(
        '[workload]\nwork_distribution = "uniform"\nwork_min_cycles = 30\nwork_max_cycles = 20\n'
    ) == (
        "s.toml: workload.work_min_cycles = 30: must be at most workload.work_max_cycles = 20 "
        'when workload.work_distribution is "uniform"'
    )


def test_geometric_mean_must_not_exceed_its_cap():
    assert only_problem('[workload]\nwork_distribution = "geometric"\nwork_cycles = 30\n') == (
        "s.toml: workload.work_cycles = 30: must be at most workload.work_max_cycles = 20 "
        '(default) when workload.work_distribution is "geometric", since it caps the work'
    )


def test_the_grid_may_not_exceed_the_largest_mesh():
    assert only_problem("[machine]\nrows = 4096\ncols = 1025\n") == (
        "s.toml: machine.rows x machine.cols = 4096 x 1025 = 4_198_400 PEs: "
        "must be at most 4_194_304 PEs"
    )
    load_scenario("x.toml", text="[machine]\nrows = 4096\ncols = 1024\n")


def test_hot_regions_outside_the_grid_are_named_by_index():
    problems = problems_of(
        '[machine]\nrows = 10\ncols = 20\n[workload]\ntype = "hotspot"\n'
        "hot_regions = [[0, 0, 10, 20], [2, 5, 11, 6], [-1, 3, 4, 3]]\n"
    )
    assert problems == [
        "s.toml: workload.hot_regions: 2 of its 3 regions do not fit the 10 x 20 grid (give regions for this grid): "
        "[1] = [2, 5, 11, 6]: row1 = 11 is beyond machine.rows = 10; [2] = [-1, 3, 4, 3]: row0 = -1 is negative, "
        "col1 = 3 is not greater than col0 = 3; a region [row0, col0, row1, col1] needs 0 <= row0 < row1 <= 10 and "
        "0 <= col0 < col1 <= 20",
    ]
    one = problems_of('[machine]\nrows = 10\ncols = 20\n[workload]\ntype = "hotspot"\n'
                      "hot_regions = [[0, 0, 10, 20], [2, 5, 11, 6]]\n")
    assert one == ["s.toml: workload.hot_regions[1] = [2, 5, 11, 6]: row1 = 11 is beyond machine.rows = 10; a region "
                   "[row0, col0, row1, col1] needs 0 <= row0 < row1 <= 10 and 0 <= col0 < col1 <= 20"]


def test_the_shipped_hotspot_scaled_down_is_one_message_not_one_per_region():
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / "scenarios" / "wse2_hotspot.toml"
    with pytest.raises(InputError) as e:
        load_scenario(shipped, ["machine.rows=64", "machine.cols=64"])
    assert len(e.value.problems) == 1 and "16 of its 16 regions do not fit the 64 x 64 grid" in e.value.problems[0]
    assert "; and 13 more;" in e.value.problems[0]


def test_a_chips_name_as_the_machine_type_says_which_machine_and_preset_to_write():
    for chip, machine, preset in (("wse2", "mesh", "wse2"), ("WSE-3", "mesh", "wse3"), ("SN40L", "rdu", "sn40l"),
                                  ("gc200", "ipu", "gc200")):
        assert problems_of(f'[machine]\ntype = "{chip}"\n') == [
            f's.toml: machine.type = "{chip}": must be one of "mesh", "rdu", "ipu"; "{chip}" is a preset of the '
            f'{machine}: write machine.type = "{machine}" and machine.preset = "{preset}"']
    assert problems_of('[machine]\ntype = "rdux"\n') == [
        's.toml: machine.type = "rdux": must be one of "mesh", "rdu", "ipu"; did you mean "rdu"?']


def test_a_trace_workload_needs_a_trace_file():
    assert only_problem('[workload]\ntype = "trace"\n') == (
        's.toml: workload.trace_file = "" (default): required when workload.type is "trace": '
        "the path of a CSV or HDF5 trace, relative to the scenario file"
    )


def test_a_trace_file_is_looked_for_beside_the_scenario(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text("cycle,row,col,work_cycles\n0,0,0,1\n")
    path = tmp_path / "s.toml"
    path.write_text('[workload]\ntype = "trace"\ntrace_file = "traces/t.csv"\n')
    s = load_scenario(path)
    assert s.trace_path == str(tmp_path / "traces" / "t.csv")

    path.write_text('[workload]\ntype = "trace"\ntrace_file = "t.csv"\n')
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    assert caught.value.problems == [
        f'{path}: workload.trace_file = "t.csv": no such trace file '
        f"(looked for {tmp_path / 't.csv'})"
    ]


def test_a_trace_file_of_a_scenario_given_as_text_is_relative_to_the_current_folder(
    tmp_path, monkeypatch
):
    (tmp_path / "t.csv").write_text("cycle,row,col,work_cycles\n0,0,0,1\n")
    monkeypatch.chdir(tmp_path)
    s = load_scenario(None, text='[workload]\ntype = "trace"\ntrace_file = "t.csv"\n')
    assert s.trace_path == str(tmp_path / "t.csv")
    assert load_scenario(None, text="").trace_path is None


# ---------------------------------------------------------------------------------------------
# All at once


def test_every_problem_is_reported_in_one_error():
    problems = problems_of(
        "[machine]\nhop_latency_cycles = 9\nrows = 1.5\n"
        '[migration]\npolicy = "least"\n'
        "[workload]\ninjection_rat = 0.1\nhot_rate = 0.7\n"
        "[wrkload]\n",
        overrides=["run.cycles=0", "run.cyles=5", "bad"],
    )
    assert problems == [
        "s.toml: workload.injection_rat: unknown key; did you mean workload.injection_rate?",
        "s.toml: [wrkload]: unknown section; did you mean [workload]?",
        "override bad: expected section.key=value, e.g. machine.rows=64",
        "override run.cyles=5: run.cyles: unknown key; did you mean run.cycles?",
        "override run.cycles=0: run.cycles = 0: must be an integer in [1, 100_000_000] (cycles)",
        "s.toml: machine.rows = 1.5: must be an integer in [1, 4096] (PEs)",
        "s.toml: machine.hop_latency_cycles = 9: must be an integer in [1, 8] (cycles)",
        's.toml: migration.policy = "least": must be one of "none", "least_loaded", '
        '"random_lower", "diffusion", "gradient", "work_stealing"; did you mean "least_loaded"?',
        's.toml: workload.hot_rate = 0.7: applies only when workload.type is "hotspot" '
        '(it is "uniform")',
    ]


def test_the_error_text_is_one_problem_per_line():
    with pytest.raises(InputError) as caught:
        load_scenario("s.toml", text="[run]\ncycles = 0\nseed = -1\n")
    assert str(caught.value).splitlines() == caught.value.problems
    assert len(caught.value.problems) == 2


# ---------------------------------------------------------------------------------------------
# The parameter table and the reference generated from it


def test_every_parameter_is_well_formed_and_its_default_is_valid():
    seen = set()
    for p in PARAMS:
        assert (p.section, p.name) not in seen
        seen.add((p.section, p.name))
        assert p.type in TYPES
        assert p.description and "\n" not in p.description
        assert p.name.isascii() and p.name == p.name.lower()
        if p.applies_when is not None:
            key, values = p.applies_when
            other = param(*key.split("."))
            allowed = (True, False) if other.type == "bool" else other.choices
            assert set(values) <= set(allowed)
    # Defaults alone must make a valid scenario.
    scenario_from_dict({})


def test_the_parameter_reference_lists_every_key_with_its_range():
    text = parameter_reference_markdown()
    for section in sections():
        assert f"## `[{section}]`" in text
    for p in PARAMS:
        assert f"| `{p.name}` |" in text
    assert "| `hop_latency_cycles` | int | cycles | `1` | [1, 8] |" in text
    assert 'Only when workload.type is "hotspot".' in text


def test_update_file_rewrites_only_the_marked_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# meshsim\n\n{START_MARKER}\nOLD BLOCK\n{END_MARKER}\n\nafter\n")
    assert update_file(readme) is True
    text = readme.read_text()
    assert text.startswith(f"# meshsim\n\n{START_MARKER}\n")
    assert text.endswith(f"{END_MARKER}\n\nafter\n")
    assert "OLD BLOCK" not in text and parameter_reference_markdown() in text
    assert update_file(readme) is False

    readme.write_text("# no markers\n")
    with pytest.raises(InputError, match="params:start"):
        update_file(readme)


def test_threshold_above_capacity_is_fine_when_migration_is_off():
    from meshsim.scenario import scenario_from_dict

    sc = scenario_from_dict({"machine": {"queue_capacity": 2}, "migration": {"policy": "none", "threshold": 4}})
    assert sc.get("migration", "threshold") == 4


def test_work_cycles_is_rejected_where_the_work_distribution_ignores_it():
    problem = only_problem('[workload]\nwork_distribution = "uniform"\nwork_cycles = 5\n')
    assert problem == ('s.toml: workload.work_cycles = 5: applies only when workload.work_distribution is '
                       '"fixed" or "geometric" (it is "uniform")')


IPU = '[machine]\ntype = "ipu"\n[workload]\ntype = "transformer"\nn_layers = 4\n'


def load_scenario_text(text, overrides=()):
    return load_scenario("s.toml", overrides, text=text)


def test_a_keys_old_name_is_read_as_its_new_one_with_a_warning_and_both_are_refused():
    with pytest.warns(FutureWarning, match="s.toml: workload.gradient_accumulation is now workload.microbatches"):
        sc = load_scenario_text(IPU + "gradient_accumulation = 8\n")
    assert sc.get("workload", "microbatches") == 8 and "gradient_accumulation" not in sc.values["workload"]
    with pytest.warns(FutureWarning, match="override workload.layers_per_ipu=.*is now workload.layers_per_stage"):
        sc = load_scenario_text(IPU, ["workload.layers_per_ipu=[0, 2, 2]"])
    assert sc.get("workload", "layers_per_stage") == [0, 2, 2]
    for text in (IPU + "microbatches = 2\ngradient_accumulation = 8\n",
                 IPU + "gradient_accumulation = 8\nmicrobatches = 2\n"):
        assert only_problem(text) == ("s.toml: workload.gradient_accumulation = 8: is the old name of "
                                      "workload.microbatches, which the file sets to 2; keep workload.microbatches")


def test_a_scenario_resolved_before_the_rename_reads_as_it_ran():
    # A resolved scenario lists every key: written before the rename, it holds both names, one of
    # them at its default. The rdu's ran on microbatches, the ipu's on gradient_accumulation.
    rdu = ('[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\nn_layers = 4\nparallelism = "T1P2D1"\n'
           "batch = 8\nmicrobatches = 4\nlayers_per_stage = [1, 3]\ngradient_accumulation = 1\nlayers_per_ipu = []\n")
    sc = load_scenario_text(rdu)
    assert sc.get("workload", "microbatches") == 4 and sc.get("workload", "layers_per_stage") == [1, 3]
    with pytest.warns(FutureWarning) as got:
        sc = load_scenario_text(IPU + "microbatches = 1\nlayers_per_stage = []\ngradient_accumulation = 8\n"
                                      "layers_per_ipu = [0, 2, 2]\nbatch = 8\n")
    assert sorted(str(w.message).split(": ")[1].split(" is")[0] for w in got) == [
        "workload.gradient_accumulation", "workload.layers_per_ipu"]
    assert sc.get("workload", "microbatches") == 8 and sc.get("workload", "layers_per_stage") == [0, 2, 2]
    # and a result written before the rename is read back as it ran
    mesh = load_scenario_text('[machine]\ntype = "mesh"\n[workload]\nmicrobatches = 1\ngradient_accumulation = 1\n'
                              "layers_per_stage = []\nlayers_per_ipu = []\n")
    assert mesh.get("workload", "microbatches") == 1


def test_the_mesh_presets_fill_the_wafer_and_the_default_is_the_keys_defaults():
    from meshsim.mesh.keys import PRESETS

    plain = scenario_from_dict({}).values["machine"]
    assert plain["preset"] == "wse2" and all(plain[k] == v for k, v in PRESETS["wse2"].items())
    three = scenario_from_dict({"machine": {"preset": "wse3"}}).values["machine"]
    assert (three["rows"], three["cols"]) == (762, 1172) and three["sram_kib"] == 48
    # a key the scenario sets wins over the preset
    assert scenario_from_dict({"machine": {"preset": "wse3", "rows": 100}}).values["machine"]["rows"] == 100

"""Every plot kind rendered headlessly from small real result files of every machine; the data drawn is
the file's, and every figure is tidy: no two texts overlap, none is cut off, no legend covers an axes'
area, every axis label ends with its unit (meshsim.labels), integer data have discrete colour bars."""

import h5py
import matplotlib.text as mtext
import numpy as np
import pytest
from matplotlib.colors import BoundaryNorm
from PIL import Image

from meshsim import labels, plots
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.params import PARAMS
from meshsim.run import run_scenario
from meshsim.scenario import scenario_from_dict


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    out = {}
    out["hotspot"] = run_scenario(scenario_from_dict({
        "run": {"cycles": 300, "window_cycles": 50}, "machine": {"rows": 12, "cols": 16},
        "workload": {"type": "hotspot", "injection_rate": 0.02, "hot_rate": 0.3},
        "output": {"frame_every_cycles": 25}}), d / "hot.h5", progress=False).path
    out["traffic"] = run_scenario(scenario_from_dict({
        "run": {"cycles": 300}, "machine": {"rows": 6, "cols": 6}, "migration": {"policy": "none"},
        "workload": {"type": "traffic", "injection_rate": 0.1, "warmup_cycles": 50, "measure_cycles": 150}}),
        d / "noc.h5", progress=False).path
    out["pipeline"] = run_scenario(scenario_from_dict({
        "run": {"cycles": 400}, "machine": {"rows": 24, "cols": 24}, "migration": {"policy": "none"},
        "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1, "n_heads": 2, "seq_len": 16,
                     "batch": 1, "vocab_size": 0}}), d / "pipe.h5", progress=False).path
    out["rdu"] = run_scenario(scenario_from_dict({
        "machine": {"type": "rdu", "preset": "sn10"},
        "workload": {"type": "transformer", "hidden_size": 256, "n_heads": 4, "n_layers": 2, "seq_len": 256,
                     "batch": 4, "tile_tokens": 32, "parallelism": "T1P2D1", "microbatches": 2}}),
        d / "rdu.h5", progress=False).path
    out["ipu"] = run_scenario(scenario_from_dict({
        "run": {"steps": 2}, "machine": {"type": "ipu", "tiles": 16, "gemm_block": 16, "tile_sram_kib": 4096},
        "workload": {"type": "transformer", "hidden_size": 64, "n_layers": 2, "n_heads": 4, "seq_len": 40, "batch": 4,
                     "vocab_size": 100, "training": True, "layers_per_stage": [0, 1, 1], "microbatches": 2}}),
        d / "ipu.h5", progress=False).path
    model = {"hidden_size": 64, "n_layers": 2, "n_heads": 4, "batch": 1, "context": 20, "output_tokens": 6}
    out["mesh_decode"] = run_scenario(scenario_from_dict({
        "machine": {"rows": 8, "cols": 8}, "migration": {"policy": "none"},
        "workload": {"type": "decode", **model, "kv_policy": "append"}}), d / "md.h5", progress=False).path
    out["ipu_decode"] = run_scenario(scenario_from_dict({
        "machine": {"type": "ipu", "tiles": 16}, "workload": {"type": "decode", **model, "vocab_size": 100,
                                                              "layers_per_stage": [0, 1, 1]}}),
        d / "id.h5", progress=False).path
    out["rdu_decode"] = run_scenario(scenario_from_dict({
        "machine": {"type": "rdu", "preset": "sn40l"},
        "workload": {"type": "decode", **model, "vocab_size": 100, "parallelism": "T2P1D1"}}),
        d / "rd.h5", progress=False).path
    return out


EXPECTED = {"hotspot": ["heatmap", "animation", "timeline", "latency", "busy"],
            "traffic": ["heatmap", "animation", "timeline", "latency", "busy", "links"],
            "pipeline": ["heatmap", "animation", "timeline", "latency", "busy", "links", "roofline"],
            "rdu": ["timeline", "latency", "busy", "gantt", "roofline"],
            "ipu": ["timeline", "latency", "busy", "roofline"],
            "mesh_decode": ["busy", "roofline", "generation"],
            "ipu_decode": ["busy", "roofline", "generation"],
            "rdu_decode": ["roofline", "generation"]}


def drawn_texts(fig) -> list:
    """(text, its box in pixels) of every text drawing `fig` draws: tick labels, axis labels, titles,
    legend texts, annotations (their text alone, not their leader lines) and the rest."""
    drawn = []
    real = mtext.Text.draw

    def draw(self, renderer):
        real(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self, mtext.Text.get_window_extent(self, renderer)))

    mtext.Text.draw = draw
    try:
        fig.draw_without_rendering()  # every artist placed and drawn, nothing painted
    finally:
        mtext.Text.draw = real
    return drawn


def assert_tidy(fig, what=""):
    """No two texts of `fig` overlap, each lies within the figure, no legend covers any axes' area, and
    every axis drawn with tick labels has a label that ends with its unit."""
    drawn = drawn_texts(fig)
    page = fig.bbox.padded(1)
    for i, (a, box) in enumerate(drawn):
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, \
            f"{what}: {a.get_text()!r} is cut off by the figure's edge"
        for b, other in drawn[i + 1:]:
            w = min(box.x1, other.x1) - max(box.x0, other.x0)
            h = min(box.y1, other.y1) - max(box.y0, other.y0)
            assert not (w > 0.5 and h > 0.5), f"{what}: {a.get_text()!r} overlaps {b.get_text()!r}"
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    for lg in legends:
        for ax in fig.axes:
            assert not lg.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), \
                f"{what}: a legend covers the axes of {ax.get_ylabel() or ax.get_xlabel()!r}"
    shown = {id(t) for t, _ in drawn}
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.get_ticklabels() + axis.get_ticklabels(minor=True)
            if any(id(t) in shown for t in ticks) or any(id(t.label2) in shown for t in axis.get_major_ticks()):
                text = axis.label.get_text()
                assert labels.has_unit(text), f"{what}: the axis label {text!r} does not end with its unit"
    return drawn


def tidied(monkeypatch) -> list:
    """The figures the plots tidy (every one, an animation's included), in order."""
    figs = []
    real = plots.tidy

    def keep(fig, *a, **kw):
        if fig not in figs:
            figs.append(fig)
        return real(fig, *a, **kw)

    monkeypatch.setattr(plots, "tidy", keep)
    return figs


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_applicable_kind_renders_tidily(files, name, tmp_path, monkeypatch):
    figs = tidied(monkeypatch)
    assert plots.applicable(files[name]) == EXPECTED[name]
    written = plots.plot(files[name], tmp_path)
    assert {p.stem for p in written} == set(EXPECTED[name])
    for p in written:
        assert p.stat().st_size > 5_000
        with Image.open(p) as im:
            assert im.size[0] >= 600 and im.size[1] >= 400
            if p.suffix == ".gif":
                assert 2 <= im.n_frames <= plots.MAX_FRAMES
    assert len(figs) == len(EXPECTED[name])
    for kind, fig in zip(EXPECTED[name], figs, strict=True):
        assert_tidy(fig, f"{name} {kind}")


def test_other_formats(files, tmp_path):
    for fmt in ("svg", "pdf"):
        [p] = plots.plot(files["hotspot"], tmp_path, ["busy"], fmt)
        assert p.suffix == f".{fmt}" and p.stat().st_size > 5_000


def capture(monkeypatch):
    figs = []
    real = plots._save

    def keep(fig, out, name, fmt):
        figs.append(fig)
        return real(fig, out, name, fmt)

    monkeypatch.setattr(plots, "_save", keep)
    return figs


def test_the_heat_map_shows_the_frame_nearest_the_cycle(files, tmp_path, monkeypatch):
    figs = capture(monkeypatch)
    plots.heatmap(files["hotspot"], tmp_path, cycle=130)
    with h5py.File(files["hotspot"]) as f:
        at = f["occupancy/frame_cycle"][()]
        i = int(np.argmin(np.abs(at - 130)))
        frame = f["occupancy/queue_depth"][i]
    image = figs[0].axes[0].images[0]
    assert np.array_equal(np.asarray(image.get_array()), frame)
    assert f"cycle {int(at[i]):,}" in figs[0].axes[0].get_title()
    # queue depths are integers: a colour per depth, the colour bar's ticks on integers
    top = max(1, int(frame.max()))
    assert isinstance(image.norm, BoundaryNorm) and image.cmap.N == top + 1
    assert image.norm.boundaries.tolist() == [k - 0.5 for k in range(top + 2)]
    ticks = image.colorbar.get_ticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks)


def test_the_busy_map_is_the_files_busy_cycles(files, tmp_path, monkeypatch):
    figs = capture(monkeypatch)
    plots.busy(files["rdu"], tmp_path)
    with h5py.File(files["rdu"]) as f:
        b = f["units/pcu_busy_cycles"][()]
    assert np.array_equal(np.asarray(figs[0].axes[0].images[0].get_array()), b)


def test_binning_is_the_exact_cycle_weighted_mean():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 50, 997)
    lengths = rng.integers(1, 9, 997)
    starts, means = plots._binned(values, lengths, points=40)
    per_cycle = np.repeat(values, lengths)
    edges = list(starts) + [per_cycle.size]
    for k in range(len(means)):
        assert means[k] == pytest.approx(per_cycle[edges[k]:edges[k + 1]].mean())
    s2, m2 = plots._binned(per_cycle, None, points=40)
    assert np.allclose(m2, means)


def test_plot_refuses_what_the_file_cannot_show(files, tmp_path):
    with pytest.raises(InputError, match="no data for --kind gantt"):
        plots.plot(files["hotspot"], tmp_path, ["gantt"])
    with pytest.raises(InputError, match="must be among"):
        plots.plot(files["hotspot"], tmp_path, ["pie"])
    with pytest.raises(InputError, match="--format"):
        plots.plot(files["hotspot"], tmp_path, ["busy"], "jpg")


def test_the_command_line_draws_and_refuses(files, tmp_path, capsys):
    assert main(["plot", str(files["hotspot"]), "--kind", "heatmap,latency", "-o", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heatmap.png", "latency.png"]
    assert main(["plot", str(files["hotspot"]), "--kind", "links", "-o", str(tmp_path)]) == 2
    assert "no data for --kind links" in capsys.readouterr().err


def test_the_timeline_and_latency_show_the_files_figures(files, tmp_path, monkeypatch):
    figs = capture(monkeypatch)
    plots.timeline(files["hotspot"], tmp_path)
    plots.latency(files["hotspot"], tmp_path)
    with h5py.File(files["hotspot"]) as f:
        li = f["windows/li"][()]
        h = f["latency/histogram"][()]
    assert np.array_equal(figs[0].axes[0].lines[0].get_ydata(), li)
    bars = [p.get_height() for p in figs[1].axes[0].patches]
    top = int(np.flatnonzero(h)[-1]) + 1
    assert bars == h[:top].tolist()


def test_a_file_without_totals_draws_what_it_has_and_refuses_the_rest(files, tmp_path, capsys):
    import shutil

    cut = tmp_path / "cut.incomplete.h5"
    shutil.copy(files["hotspot"], cut)
    with h5py.File(cut, "a") as f:
        for g in ("units", "latency"):
            for k in list(f[g]):
                del f[g][k]
    assert plots.applicable(cut) == ["heatmap", "animation", "timeline"]
    assert main(["plot", str(cut), "--kind", "busy", "-o", str(tmp_path / "o")]) == 2
    assert "no data for --kind busy" in capsys.readouterr().err


def test_cycles_and_folders_are_checked(files, tmp_path, capsys):
    assert main(["plot", str(files["hotspot"]), "--kind", "heatmap", "--cycle", "99999", "-o", str(tmp_path)]) == 2
    assert "--cycle 99999: the run has cycles 0 to 299" in capsys.readouterr().err
    assert main(["plot", str(files["hotspot"]), "--kind", "busy", "--cycle", "5", "-o", str(tmp_path)]) == 2
    assert "--cycle: applies only to --kind heatmap" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["plot", str(files["hotspot"]), "--kind", "busy", "-o", str(blocker)]) == 2
    assert "is a regular file; the figures' folder must be a folder" in capsys.readouterr().err


def sweep_table(tmp_path):
    """A sweep's summary table made from real runs: LI of a hotspot against threshold and hop latency."""
    import csv

    rows = []
    for threshold in (1, 3):
        for hop in (1, 2):
            sc = scenario_from_dict({
                "run": {"cycles": 150, "window_cycles": 50}, "machine": {"rows": 8, "cols": 8,
                                                                        "hop_latency_cycles": hop},
                "migration": {"threshold": threshold}, "output": {"frame_every_cycles": 0},
                "workload": {"type": "hotspot", "injection_rate": 0.02, "hot_rate": 0.3}})
            s = run_scenario(sc, tmp_path / f"p{threshold}{hop}.h5", progress=False).summary
            rows.append({"migration.threshold": threshold, "machine.hop_latency_cycles": hop, "li": s["li"],
                         "latency_mean_cycles": s["latency_mean_cycles"]})
    path = tmp_path / "summary.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path, rows


def test_sweep_tables_draw_a_line_and_a_heat_map(tmp_path, monkeypatch):
    path, rows = sweep_table(tmp_path)
    figs = capture(monkeypatch)
    [line] = plots.sweep(path, tmp_path / "f", "li", "migration.threshold")
    [heat] = plots.sweep(path, tmp_path / "f", "li", "migration.threshold", "machine.hop_latency_cycles")
    assert line.name == "sweep_li_vs_migration_threshold.png" and heat.stat().st_size > 5_000
    means = figs[0].axes[0].lines[0].get_ydata()
    for i, t in enumerate((1, 3)):
        assert means[i] == pytest.approx(np.mean([r["li"] for r in rows if r["migration.threshold"] == t]))
    grid = np.asarray(figs[1].axes[0].images[0].get_array())
    assert grid[1, 0] == pytest.approx(next(r["li"] for r in rows if r["migration.threshold"] == 1
                                            and r["machine.hop_latency_cycles"] == 2))
    # the columns in words with their units, from the parameter table and the summary's names
    line_ax, heat_ax, bar_ax = figs[0].axes[0], figs[1].axes[0], figs[1].axes[1]
    assert line_ax.get_xlabel() == "migration threshold (tasks)"
    assert line_ax.get_ylabel() == "LI, mean / max busy (fraction)"
    assert (heat_ax.get_xlabel(), heat_ax.get_ylabel()) == ("migration threshold (tasks)",
                                                            "machine hop latency (cycles)")
    assert bar_ax.get_ylabel() == "LI, mean / max busy (fraction)"
    for fig in figs:
        assert_tidy(fig, "sweep")
    with pytest.raises(InputError, match="--x threshold: no such column"):
        plots.sweep(path, tmp_path, "li", "threshold")


def test_an_axis_of_keys_joined_by_plus_takes_their_values_together(tmp_path, monkeypatch):
    import csv

    path = tmp_path / "zipped.csv"
    rows = [{"migration.policy": p, "workload.type": w, "workload.hot_rate": h, "refused_share": v}
            for p, base in (("none", 0.0), ("gradient", 1.0))
            for (w, h), v in zip((("uniform", 0.5), ("hotspot", 0.25), ("hotspot", 0.5)), (0.1, 0.2, 0.3),
                                 strict=True)
            for v in [base + v]]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    figs = capture(monkeypatch)
    [heat] = plots.sweep(path, tmp_path / "f", "refused_share", "migration.policy", "workload.type+workload.hot_rate")
    assert heat.name == "sweep_refused_share_vs_migration_policy_workload_type_workload_hot_rate.png"
    ax = figs[0].axes[0]
    # The joined axis keeps the table's order; the plain one is sorted.
    assert [t.get_text() for t in ax.get_yticklabels()] == ["uniform 0.5", "hotspot 0.25", "hotspot 0.5"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gradient", "none"]
    grid = np.asarray(ax.images[0].get_array())
    assert grid[:, 0].tolist() == pytest.approx([1.1, 1.2, 1.3])
    assert grid[:, 1].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert ax.get_ylabel().replace("\n", " ") == "workload type + hot rate (name, tasks/PE/cycle)"
    assert figs[0].axes[1].get_ylabel() == "refused share of injected (fraction)"
    assert_tidy(figs[0], "zipped sweep")
    with pytest.raises(InputError, match="--y workload.hot: no such column"):
        plots.sweep(path, tmp_path, "refused_share", "migration.policy", "workload.type+workload.hot")


def test_long_names_and_counts_on_a_sweep_stay_apart(tmp_path, monkeypatch):
    """Names side by side turn upright rather than run into each other; a count's heat map has a
    discrete colour bar; each cell's value is written in ink that shows on its colour."""
    import csv

    path = tmp_path / "names.csv"
    policies = ("none", "least_loaded", "gradient", "diffusion", "work_stealing_random", "threshold_greedy")
    rows = [{"migration.policy": p, "migration.threshold": t, "migrated": (t + k) % 5, "latency_p99_cycles": 12.0 * t}
            for k, p in enumerate(policies) for t in (1, 2, 4, 8, 16)]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    figs = capture(monkeypatch)
    plots.sweep(path, tmp_path / "f", "latency_p99_cycles", "migration.policy")
    plots.sweep(path, tmp_path / "f", "migrated", "migration.policy", "migration.threshold")
    for fig in figs:
        assert_tidy(fig, "names")
    assert {t.get_rotation() for t in figs[0].axes[0].get_xticklabels()} == {90}
    heat = figs[1].axes[0]
    assert isinstance(heat.images[0].norm, BoundaryNorm)
    assert all(float(t).is_integer() for t in heat.images[0].colorbar.get_ticks())
    inks = {t.get_color() for t in heat.texts}
    assert inks == {"black", "white"}  # light cells (yellow) take black, dark ones white


def test_every_column_a_sweep_can_plot_has_words_and_a_unit(files):
    """Every scenario key, and every number of every machine's summary, is named with a unit."""
    import meshsim

    for p in PARAMS:
        label = labels.column_label(p.path)
        assert labels.has_unit(label) and "(as in the table)" not in label, label
    for name, path in files.items():
        with meshsim.load(path) as r:
            summary = r.summary
        for key, value in summary.items():
            if isinstance(value, (int, float)):
                assert labels.summary_label(key) is not None, f"{name}: summary figure {key} has no label"
    assert labels.column_label("machine.hop_latency_cycles") == "machine hop latency (cycles)"
    assert labels.column_label("latency_var_cycles2") == "latency variance (cycles²)"
    assert labels.column_label("samples_per_second") == "samples, chip and host (samples/s)"
    assert labels.column_label("mystery") == "mystery (as in the table)"


def test_the_command_line_draws_a_sweep_table(tmp_path, capsys):
    path, _ = sweep_table(tmp_path)
    assert main(["plot", str(path), "--metric", "latency_mean_cycles", "--x", "machine.hop_latency_cycles"]) == 0
    assert (tmp_path / "summary" / "sweep_latency_mean_cycles_vs_machine_hop_latency_cycles.png").exists()
    assert main(["plot", str(path)]) == 2
    assert "needs --metric and --x" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ipu_decode", "rdu_decode", "mesh_decode"])
def test_the_generation_plots_mean_is_the_summarys_time_per_token(files, name, tmp_path, monkeypatch):
    import meshsim

    figs = tidied(monkeypatch)
    plots.plot(files[name], tmp_path, kinds=["generation"])
    with meshsim.load(files[name]) as r:
        mean = r.summary["time_per_token_ms_mean"]
    texts = [t.get_text() for ax in figs[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert f"mean {mean:.4g} ms" in texts

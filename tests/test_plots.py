"""Every plot kind rendered headlessly from small real result files; the data drawn is the file's."""

import h5py
import numpy as np
import pytest
from PIL import Image

from meshsim import plots
from meshsim.cli import main
from meshsim.errors import InputError
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
    return out


EXPECTED = {"hotspot": ["heatmap", "animation", "timeline", "latency", "busy"],
            "traffic": ["heatmap", "animation", "timeline", "latency", "busy", "links"],
            "pipeline": ["heatmap", "animation", "timeline", "latency", "busy", "links", "roofline"],
            "rdu": ["timeline", "latency", "busy", "gantt", "roofline"]}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_applicable_kind_renders(files, name, tmp_path):
    assert plots.applicable(files[name]) == EXPECTED[name]
    written = plots.plot(files[name], tmp_path)
    assert {p.stem for p in written} == set(EXPECTED[name])
    for p in written:
        assert p.stat().st_size > 5_000
        with Image.open(p) as im:
            assert im.size[0] >= 600 and im.size[1] >= 400
            if p.suffix == ".gif":
                assert 2 <= im.n_frames <= plots.MAX_FRAMES


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
    shown = figs[0].axes[0].images[0].get_array()
    assert np.array_equal(np.asarray(shown), frame)
    assert f"cycle {int(at[i]):,}" in figs[0].axes[0].get_title()


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
    with pytest.raises(InputError, match="--y workload.hot: no such column"):
        plots.sweep(path, tmp_path, "refused_share", "migration.policy", "workload.type+workload.hot")


def test_the_command_line_draws_a_sweep_table(tmp_path, capsys):
    path, _ = sweep_table(tmp_path)
    assert main(["plot", str(path), "--metric", "latency_mean_cycles", "--x", "machine.hop_latency_cycles"]) == 0
    assert (tmp_path / "summary" / "sweep_latency_mean_cycles_vs_machine_hop_latency_cycles.png").exists()
    assert main(["plot", str(path)]) == 2
    assert "needs --metric and --x" in capsys.readouterr().err

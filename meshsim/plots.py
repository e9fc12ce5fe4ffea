"""The bundled plots of a result file (`meshsim plot`), each also an importable function.

Every function takes a result path and an output folder, writes its figure(s) there and returns the
paths written. Figures are matplotlib `Figure` objects drawn without pyplot, so nothing depends on a
display or changes the caller's backend. Colour maps are viridis and cividis (readable with colour
blindness), discrete (one colour per integer, ticks on integers) for integer data such as queue
depths; every title names the scenario. Every axis label, colour bars' included, ends with its unit
in parentheses (meshsim.labels: a unit of measure, the things counted, "(index)", "(fraction)",
"(dimensionless)" or "(name)"); a sweep's columns are named in words with their units. No two
labels collide and no legend covers data: legends sit outside the axes, and every figure is drawn
once through meshsim.plotlayout.tidy before it is saved, which thins or turns tick labels that run
into each other and wraps labels longer than their room. Long series are reduced to at most
`MAX_POINTS` points by exact cycle-weighted means, and animations to at most `MAX_FRAMES` frames, so
a full-wafer, 10,000-cycle run draws in seconds.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import h5py
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import metrics
from .errors import InputError
from .labels import column_label
from .output import open_result_file
from .plotlayout import integer_colour_bar, integer_colours, legend_below, legend_beside, place_labels, tidy
from .report import read_summary

MAX_POINTS = 4000
MAX_FRAMES = 60
FORMATS = ("png", "svg", "pdf")
KINDS = ("heatmap", "animation", "timeline", "latency", "busy", "links", "gantt", "roofline", "generation")

#: A generation's cache per token and unit (docs/decode.md, docs/ipu.md and docs/rdu.md, "Generation"):
#: dataset -> (what it counts, the units it is over).
_CACHES = {"occupancy/cache_tokens": ("tokens", "row of PEs"), "occupancy/cache_bytes": ("bytes", None)}


def _figure(w=8.0, h=5.0) -> Figure:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: must be one of {', '.join(FORMATS)}")


def _folder(out) -> Path:
    """The output folder, made if need be; InputError if it cannot be."""
    from .files import check_folder

    out = Path(out)
    check_folder(out, "figures' folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"-o {out}: cannot make the folder for the figures ({e.strerror or e})") from None
    return out


def _save(fig: Figure, out: Path, name: str, fmt: str) -> Path:
    """The figure as `out/name.fmt`: drawn into a new file beside it, then renamed over a regular
    file or nothing (meshsim.files: never into a device, a FIFO or through a link). The figure is tidied
    first (meshsim.plotlayout.tidy): no label runs into another."""
    tidy(fig)
    return _saved(_folder(out) / f"{name}.{fmt}", lambda fh: fig.savefig(fh, dpi=110, format=fmt))


def _title(f) -> str:
    name = f.attrs.get("scenario_name", "")
    return name.decode() if isinstance(name, bytes) else str(name)


def _binned(values: np.ndarray, lengths: np.ndarray | None = None, points: int = MAX_POINTS):
    """(start cycle, mean value) of at most `points` bins of a per-cycle series (lengths None) or a
    run-length encoded one (value i holds for lengths[i] cycles), cycle-weighted and exact."""
    values = np.asarray(values, np.float64)
    if lengths is None:
        lengths = np.ones(values.size, np.int64)
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0), np.zeros(0)
    edges = np.linspace(0, total, min(points, total) + 1).round().astype(np.int64)
    ends = np.cumsum(lengths)
    area = np.concatenate([[0.0], np.cumsum(values * lengths)])

    def integral(t):  # the series integrated over cycles [0, t)
        i = np.searchsorted(ends, t, side="right")
        i = np.minimum(i, values.size - 1)
        before = ends[i] - lengths[i]
        return area[i] + values[i] * np.clip(t - before, 0, lengths[i])

    inner = integral(edges)
    return edges[:-1], np.diff(inner) / np.diff(edges)


def heatmap(path, out, cycle: int | None = None, fmt: str = "png") -> list[Path]:
    """Queue depth of every PE in the frame nearest `cycle` (default the last), with the outlines of
    the workload's regions."""
    with open_result_file(path) as f:
        frames = f["occupancy/queue_depth"]
        if frames.shape[0] == 0:
            raise InputError(f"{path}: no occupancy frames (output.frame_every_cycles = 0): no heat map to draw")
        at = f["occupancy/frame_cycle"][()]
        if cycle is not None and not (0 <= cycle <= int(f.attrs.get("cycles_done", 0))):
            raise InputError(f"--cycle {cycle}: the run has cycles 0 to {int(f.attrs.get('cycles_done', 0)) - 1}")
        i = len(at) - 1 if cycle is None else int(np.argmin(np.abs(at - cycle)))
        depth = frames[i]
        labels = f["regions/region_map"][()] if "regions/region_map" in f else None
        title = _title(f)
    fig = _figure(9, 6.5)
    ax = fig.add_subplot()
    cmap, norm = integer_colours("viridis", 0, max(1, int(depth.max(initial=0))))
    im = ax.imshow(depth, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
    if labels is not None:
        ax.contour(labels, levels=np.unique(labels)[:-1] + 0.5, colors="white", linewidths=0.6)
    integer_colour_bar(fig, im, "queue depth (tasks)", ax=ax)
    ax.set_xlabel("column (PE)")
    ax.set_ylabel("row (PE)")
    ax.set_title(f"{title}: queue depth at the end of cycle {int(at[i]):,}")
    return [_save(fig, Path(out), "heatmap", fmt)]


def animation(path, out, fmt: str = "png") -> list[Path]:
    """The queue-depth frames as a GIF (and an MP4 when ffmpeg is installed), at most MAX_FRAMES of
    them, evenly spaced."""
    from matplotlib.animation import FFMpegWriter, FuncAnimation, PillowWriter

    with open_result_file(path) as f:
        frames = f["occupancy/queue_depth"]
        n = frames.shape[0]
        if n < 2:
            raise InputError(f"{path}: {n} occupancy frame(s): an animation needs at least 2")
        pick = np.unique(np.linspace(0, n - 1, min(n, MAX_FRAMES)).round().astype(int))
        data = np.stack([frames[i] for i in pick])
        at = f["occupancy/frame_cycle"][()][pick]
        q = int(f["occupancy/depth"][()].max())
        labels = f["regions/region_map"][()] if "regions/region_map" in f else None
        title = _title(f)
    fig = _figure(8, 6)
    ax = fig.add_subplot()
    cmap, norm = integer_colours("viridis", 0, max(1, q))
    im = ax.imshow(data[0], cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
    if labels is not None:
        ax.contour(labels, levels=np.unique(labels)[:-1] + 0.5, colors="white", linewidths=0.6)
    integer_colour_bar(fig, im, "queue depth (tasks)", ax=ax)
    ax.set_xlabel("column (PE)")
    ax.set_ylabel("row (PE)")
    head = ax.set_title(f"{title}: queue depth, cycle {int(at[-1]):,}")  # the longest title, laid out once
    tidy(fig)

    def draw(k):
        im.set_data(data[k])
        head.set_text(f"{title}: queue depth, cycle {int(at[k]):,}")
        return im, head

    anim = FuncAnimation(fig, draw, frames=len(pick), blit=False)
    gif = _saved(_folder(out) / "animation.gif", lambda p: anim.save(p, writer=PillowWriter(fps=8), dpi=80),
                 by_name=True)
    written = [gif]
    if shutil.which("ffmpeg"):
        written.append(_saved(Path(out) / "animation.mp4", lambda p: anim.save(p, writer=FFMpegWriter(fps=8), dpi=80),
                              by_name=True))
    return written


def _saved(path: Path, save, by_name: bool = False) -> Path:
    """`path`, written by `save` through a new file beside it (meshsim.files.write_through_temporary)."""
    from . import files

    files.write_through_temporary(path, "figure", save, by_name=by_name)
    return path


def timeline(path, out, fmt: str = "png") -> list[Path]:
    """LI per window, utilisation and queued work over time (mesh); PCU, PMU and DDR use over time
    (rdu)."""
    with open_result_file(path) as f:
        title = _title(f)
        # drawn from what the file holds: an rdu's run-length encoded series, an ipu's supersteps
        if "series/interval_cycles" in f:
            return _rdu_timeline(f, Path(out), fmt, title)
        if all(k in f for k in _IPU_TIMELINE):
            return _ipu_timeline(f, Path(out), fmt, title)
        n = f["row"].size * f["col"].size
        if not f["series/busy"][()].any() and "series/packets_delivered" in f:
            return _traffic_timeline(f, Path(out), fmt, title, n)
        busy = f["series/busy"][()]
        queued = f["series/queued"][()]
        w_start, w_end, w_li = (f["windows/window_start"][()], f["windows/window_end"][()], f["windows/li"][()])
    fig = _figure(9, 7)
    a1, a2, a3 = fig.subplots(3, 1, sharex=True)
    mid = (w_start + w_end) / 2
    a1.plot(mid, w_li, marker="o", ms=3, color="#0072B2", label="LI of a window")
    a1.axhline(0.9, color="0.5", ls="--", lw=0.8, label="0.9: a notable\nimbalance below")
    a1.set_ylabel("LI, mean / max\nbusy (fraction)")
    a1.set_ylim(0, 1.05)
    legend_beside(a1)
    t, u = _binned(busy / n)
    a2.plot(t, u, color="#009E73")
    a2.set_ylabel("utilisation, busy\nPEs / PEs (fraction)")
    a2.set_ylim(0, 1.05)
    t, qd = _binned(queued)
    a3.plot(t, qd, color="#D55E00")
    a3.set_ylabel("queued (tasks)")
    a3.set_xlabel(_TIME)
    fig.suptitle(f"{title}: load balance over time")
    return [_save(fig, out, "timeline", fmt)]


#: The label of a time axis in cycles.
_TIME = "simulated time (cycles)"


def _traffic_timeline(f, out, fmt, title, n) -> list[Path]:
    """Routed traffic has no compute load: packets offered and delivered, packets waiting, and link
    use over time."""
    rows, cols = f["row"].size, f["col"].size
    links = 2 * (rows * (cols - 1) + cols * (rows - 1))
    fig = _figure(9, 7)
    a1, a2, a3 = fig.subplots(3, 1, sharex=True)
    for name, label in (("packets_offered", "offered"), ("packets_delivered", "delivered")):
        t, v = _binned(f[f"series/{name}"][()] / n)
        a1.plot(t, v, label=label)
    a1.set_ylabel("traffic (packets / PE / cycle)")
    legend_beside(a1)
    t, v = _binned(f["series/packets_in_source"][()] + f["series/packets_in_router"][()])
    a2.plot(t, v, color="#D55E00")
    a2.set_ylabel("waiting in source and router queues (packets)")
    t, v = _binned(f["series/link_sent"][()] / max(links, 1))
    a3.plot(t, v, color="#009E73")
    a3.set_ylabel("link use (messages / link / cycle)")
    a3.set_xlabel(_TIME)
    fig.suptitle(f"{title}: routed traffic over time")
    return [_save(fig, out, "timeline", fmt)]


#: Datasets the ipu's timeline reads.
_IPU_TIMELINE = ("supersteps/step", "supersteps/stage", "supersteps/template", "supersteps/start_cycle",
                 "supersteps/compute_cycles", "supersteps/sync_cycles", "supersteps/exchange_cycles",
                 "supersteps/direction", "supersteps/pipeline_step", "supersteps/microbatch", "templates/li",
                 "templates/direction")


def _ipu_timeline(f, out, fmt, title) -> list[Path]:
    """ipu, the first step: when every stage works in each pipeline step (the bubbles and the stage
    imbalance), and the LI across tiles of micro-batch 0's supersteps against their start."""
    # steps are identical (docs/ipu.md): step 0's rows, which come first, are read alone
    g = f["supersteps"]
    n = g["step"].shape[0]
    end = 0
    while end < n:
        part = g["step"][end:end + (1 << 20)]
        zeros = int(np.searchsorted(part, 1))
        end += zeros
        if zeros < len(part):
            break
    ss = {k.split("/")[1]: f[k][:end].astype(np.int64) for k in _IPU_TIMELINE if k.startswith("supersteps/")}
    li = f["templates/li"][()]
    stages = int(f.attrs["stages"]) if "stages" in f.attrs else int(f["stage"].size)
    fig = _figure(10, 7)
    a1, a2 = fig.subplots(2, 1, sharex=True, height_ratios=(max(2, stages), 3))
    stop = ss["start_cycle"] + ss["compute_cycles"] + ss["sync_cycles"] + ss["exchange_cycles"]
    # one bar per stage, pipeline step and part (forward, or backward with its recompute): its rows are
    # consecutive, from its first start to its last end; an interleaved step (direction 3) holds both parts
    part = np.where(ss["direction"] == 3, np.minimum(f["templates/direction"][()].astype(np.int64)[ss["template"]], 1),
                    ss["direction"]) if len(ss["direction"]) else ss["direction"]
    group = ((ss["direction"] * 2 + part) * (ss["pipeline_step"].max(initial=0) + 1) + ss["pipeline_step"]) * \
        (stages + 1) + ss["stage"]
    cut = np.flatnonzero(np.diff(group)) + 1
    first, last = np.concatenate([[0], cut]), np.concatenate([cut, [len(group)]]) - 1
    colours, names = ("#0072B2", "#D55E00"), ("forward", "backward")
    bars = {}
    if len(group):
        for i, j in zip(first, last, strict=True):
            key = (int(part[i]), int(ss["stage"][i]))
            bars.setdefault(key, []).append((int(ss["start_cycle"][i]), int(stop[j] - ss["start_cycle"][i])))
    labelled = set()
    for (d, s), spans in sorted(bars.items()):
        a1.broken_barh(spans, (s - 0.4, 0.8), facecolors=colours[d], linewidth=0,
                       label=None if d in labelled else names[d])
        labelled.add(d)
    a1.set_yticks(range(stages), [f"IPU {s}" for s in range(stages)])
    a1.invert_yaxis()
    a1.set_ylabel("pipeline stage (IPU)")
    if labelled:
        legend_below(fig)
    mb0 = ss["microbatch"] == 0
    cmap, norm = integer_colours("viridis", 0, max(stages - 1, 0))
    dots = a2.scatter(ss["start_cycle"][mb0], li[ss["template"][mb0]], s=4, c=ss["stage"][mb0], cmap=cmap, norm=norm)
    integer_colour_bar(fig, dots, "stage (IPU)", ax=a2)
    a2.axhline(0.9, color="0.5", ls="--", lw=0.8)
    a2.set_ylim(0, 1.05)
    a2.set_ylabel("LI of a superstep across tiles,\nmicro-batch 0 (fraction)")
    a2.set_xlabel("simulated time in step 0 (cycles)")
    fig.suptitle(f"{title}: pipeline stages and superstep balance")
    return [_save(fig, out, "timeline", fmt)]


def _rdu_use(axes, f, ic) -> None:
    """Busy PCUs (as a share), PMUs in use and DDR busy of every chip over time, on three axes."""
    pcus = f["pcu"].size
    for ax, name, scale, label in ((axes[0], "busy_pcus", pcus, "busy PCUs (fraction)"),
                                   (axes[1], "pmus_in_use", 1, "in use (PMUs)"),
                                   (axes[2], "ddr_busy", 1, "DDR busy (fraction)")):
        series = f[f"series/{name}"][()]
        for c in range(series.shape[1]):
            t, v = _binned(series[:, c], ic)
            ax.plot(t, v / scale, lw=0.8, label=f"chip {c}")
        ax.set_ylabel(label, fontsize=8)
    axes[2].set_xlabel(_TIME)


def _rdu_timeline(f, out, fmt, title) -> list[Path]:
    fig = _figure(9, 7)
    axes = fig.subplots(3, 1, sharex=True)
    _rdu_use(axes, f, f["series/interval_cycles"][()])
    if f["chip"].size > 1:
        legend_beside(axes[0], ncols=math.ceil(f["chip"].size / 8))
    fig.suptitle(f"{title}: PCU, PMU and DDR use over time")
    return [_save(fig, out, "timeline", fmt)]


def latency(path, out, fmt: str = "png") -> list[Path]:
    """Histogram and CDF of task (or measured packet, or rdu tile) latency, mean, p99 and variance
    marked."""
    with open_result_file(path) as f:
        title = _title(f)
        if "latency/tile_latency" in f or "latency/microbatch_latency" in f:
            ipu = "latency/microbatch_latency" in f
            lat = f["latency/microbatch_latency" if ipu else "latency/tile_latency"][()]
            lat = lat[lat >= 0]
            if lat.size == 0:
                raise InputError(f"{path}: no {'micro-batch' if ipu else 'tile'} finished: no latency to draw")
            counts, edges = np.histogram(lat, bins=min(200, max(10, lat.size // 20)))
            values = edges[:-1]
            stats = dict(mean=float(lat.mean()), var=float(lat.var()),
                         p99=float(np.quantile(lat, 0.99, method="inverted_cdf")))
            what, widths, cdf_x = "micro-batches" if ipu else "tiles", np.diff(edges), edges[1:]
        else:
            h = f["latency/histogram"][()]
            a = f["latency"].attrs
            st = metrics.latency_stats(h, int(a["count"]), int(a["sum"]), int(a["sum_sq"]), int(a["max"]))
            if st["count"] == 0:
                raise InputError(f"{path}: no task completed: no latency to draw")
            top = int(np.flatnonzero(h)[-1]) + 1
            counts, values = h[:top], np.arange(top)
            stats = dict(mean=st["mean"], var=st["var"], p99=float(st["p99"]))
            units = f["latency/histogram"].attrs.get("units", "tasks")
            what, widths = (units.decode() if isinstance(units, bytes) else str(units)), np.ones(top)
            cdf_x = values  # bin i is latency i: the fraction at or below i includes it
    fig = _figure(9, 4.5)
    a1, a2 = fig.subplots(1, 2)
    a1.bar(values, counts, width=widths, align="edge", color="#0072B2")
    a2.plot(cdf_x, np.cumsum(counts) / counts.sum(), color="#0072B2", drawstyle="steps-post")
    for ax in (a1, a2):
        ax.axvline(stats["mean"], color="#D55E00", label=f"mean {stats['mean']:.4g} cycles")
        ax.axvline(stats["p99"], color="#CC79A7", ls="--", label=f"p99 {stats['p99']:.4g} cycles")
        ax.set_xlabel("latency (cycles)")
    a1.set_ylabel(f"count ({what})")
    a2.set_ylabel("share at or below (fraction)")
    a2.set_ylim(0, 1.02)
    legend_beside(a2, title=f"variance {stats['var']:.4g} cycles²")
    fig.suptitle(f"{title}: latency of {what}")
    return [_save(fig, out, "latency", fmt)]


def busy(path, out, fmt: str = "png") -> list[Path]:
    """Busy cycles of every PE (or PCU, chip by chip) as a map, and their distribution with the
    compute-time spread."""
    with open_result_file(path) as f:
        title = _title(f)
        name = next(n for n in ("units/pcu_busy_cycles", "units/tile_busy_cycles", "units/busy_cycles") if n in f)
        rdu = name != "units/busy_cycles"  # per chip (IPU) and unit, not a grid
        unit, group = {"units/pcu_busy_cycles": ("PCU", "chip"), "units/tile_busy_cycles": ("tile", "IPU")}.get(
            name, ("PE", "row (PE)"))
        b = f[name][()]
        cycles = int(f.attrs.get("cycles_done", 0))
    fig = _figure(10, 4.5)
    a1, a2 = fig.subplots(1, 2, width_ratios=(3, 2))
    im = a1.imshow(b, cmap="cividis", interpolation="nearest", aspect="auto")
    fig.colorbar(im, ax=a1, label="busy time (cycles)")
    a1.set_xlabel(f"{unit} (index)" if rdu else "column (PE)")
    a1.set_ylabel(f"{group} (index)" if rdu else group)
    if rdu:
        a1.set_yticks(range(b.shape[0]))
    lb = metrics.load_balance(b)
    spread = metrics.compute_time_spread(b)
    a2.hist(b.ravel(), bins=60, color="#009E73")
    a2.axvline(lb["mean"], color="#D55E00", label=f"mean {lb['mean']:.4g}")
    a2.axvline(lb["max"], color="#CC79A7", ls="--", label=f"max {lb['max']:,}")
    a2.set_xlabel(f"busy time, of {cycles:,} (cycles)")
    a2.set_ylabel(f"count ({unit}s)")
    legend_beside(a2, title=f"LI {lb['li']:.3g}\nspread {spread:.3g}")
    fig.suptitle(f"{title}: busy time per {unit}")
    return [_save(fig, out, "busy", fmt)]


def links(path, out, fmt: str = "png") -> list[Path]:
    """Utilisation of every link of a routed run: eastward and westward, southward and northward
    links, as maps."""
    with open_result_file(path) as f:
        if "units/link_messages" not in f:
            raise InputError(f"{path}: no per-link totals (only routed traffic and layer_pipeline runs have them)")
        m = f["units/link_messages"][()].astype(np.float64)
        cycles = int(f.attrs.get("cycles_done", 0))
        import tomllib

        text = f.attrs["scenario_resolved"]
        bw = tomllib.loads(text.decode() if isinstance(text, bytes) else text)["machine"]["link_messages_per_cycle"]
        title = _title(f)
    util = m / (bw * max(cycles, 1))
    fig = _figure(10, 7)
    axes = fig.subplots(2, 2)
    for ax, d, name in zip(axes.ravel(), (1, 3, 2, 0), ("east", "west", "south", "north"), strict=True):
        im = ax.imshow(util[:, :, d], cmap="viridis", interpolation="nearest", aspect="auto", vmin=0,
                       vmax=max(1e-9, float(util.max())))
        ax.set_title(f"{name}ward links", fontsize=9)
        ax.set_xlabel("column (PE)")
        ax.set_ylabel("row (PE)")
    fig.colorbar(im, ax=axes, label="utilisation, messages / capacity (fraction)")
    fig.suptitle(f"{title}: link utilisation over the run")
    return [_save(fig, out, "links", fmt)]


def gantt(path, out, fmt: str = "png") -> list[Path]:
    """rdu: the section instances of every chip over time, with busy PCUs, PMUs in use and DDR busy
    underneath."""
    with open_result_file(path) as f:
        if "sections" not in f:
            raise InputError(f"{path}: not an rdu result with sections: no Gantt chart to draw")
        s = f["sections"]
        chip, start, end = s["chip"][()], s["start_cycle"][()], s["end_cycle"][()]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in s["name"][()]]
        mb = s["microbatch"][()]
        ic = f["series/interval_cycles"][()]
        phase = f["series/phase"][()]
        title = _title(f)
        chips = int(chip.max()) + 1 if chip.size else 1
        fig = _figure(11, 3 + 1.2 * chips)
        axes = fig.subplots(4, 1, sharex=True, height_ratios=(chips, 1, 1, 1))
        _rdu_use(axes[1:], f, ic)
    colours = {"forward": "#0072B2", "backward": "#E69F00", "gradient all-reduce": "#009E73",
               "optimiser update": "#CC79A7", "switching or waiting": "#BBBBBB"}
    for i, (c, s0, e0, name) in enumerate(zip(chip, start, end, names, strict=True)):
        kind = (("optimiser update" if name.endswith(":optimizer") else "gradient all-reduce") if mb[i] < 0
                else ("backward" if ".backward" in name else "forward"))
        axes[0].broken_barh([(s0, e0 - s0 + 1)], (c - 0.4, 0.8), facecolors=colours[kind], edgecolor="white",
                            linewidth=0.2)
    # the cycles a chip spent reconfiguring or waiting for another chip, over its sections' bars
    t0 = np.concatenate([[0], np.cumsum(ic)[:-1]])
    for c in range(phase.shape[1]):
        ph = phase[:, c]
        off = (ph == 0) | (ph == 1)
        if off.any():
            edge = np.flatnonzero(np.diff(np.concatenate([[0], off.astype(np.int8), [0]])))
            spans = [(int(t0[a]), int(t0[b - 1] + ic[b - 1] - t0[a])) for a, b in zip(edge[::2], edge[1::2],
                                                                                     strict=True)]
            axes[0].broken_barh(spans, (c - 0.4, 0.8), facecolors=colours["switching or waiting"], linewidth=0)
    axes[0].set_yticks(range(chips), [f"chip {c}" for c in range(chips)])
    axes[0].invert_yaxis()
    axes[0].set_ylabel("simulated chip (index)", fontsize=8)
    handles = [axes[0].barh([0], [0], color=v, label=k) for k, v in colours.items()]
    legend_beside(axes[0], handles=handles)
    fig.suptitle(f"{title}: sections over time ({len(names)} instances)")
    return [_save(fig, out, "gantt", fmt)]


#: A roofline kernel's dot by what bounds it (meshsim.roofline.kernels_of), and the colours' names.
BOUND_COLOURS = {"compute": "#0072B2", "memory": "#D55E00", "weights": "#009E73", "on-chip": "#E69F00",
                 "interconnect": "#CC79A7", "exchange": "#CC79A7", "sync": "#999999"}
BOUND_NAMES = {"compute": "blue", "memory": "orange", "weights": "green", "on-chip": "yellow",
               "interconnect": "pink", "exchange": "pink", "sync": "grey"}


def roofline(path, out, fmt: str = "png") -> list[Path]:
    """The platforms' rooflines and the run's transformer kernels on its machine."""
    from .roofline import kernels_of, kernels_title, model_of, platform_of, presets, values_of_file

    values = values_of_file(path)
    found = model_of(values)
    if found is None:
        raise InputError(f"{path}: its workload is no transformer: no kernels to place on a roofline")
    plat = platform_of(values)
    if plat is None:
        raise InputError(f"{path}: its machine has no roofline: no kernels to place on one")
    rows = kernels_of(values, plat)
    with open_result_file(path) as f:
        title = _title(f)
    fig = _figure(9, 6)
    ax = fig.add_subplot()
    ai = np.logspace(-2, 5, 400)
    styles = ["-", "--", "-.", ":"]
    greys = ["#56B4E9", "#999999", "#CC79A7", "#F0E442"]  # roofs in colours the kernels' dots do not use
    for k, p in enumerate([*presets().values(), plat]):
        mine = k == len(presets())
        ax.plot(ai, [p.attainable(x) / 1e12 for x in ai], ls="-" if mine else styles[k % 4],
                lw=2.2 if mine else 1.2, color="black" if mine else greys[k % 4],
                label=f"{p.name} (ridge {p.ridge:.3g} FLOP/B)")
    names = {}  # (x, y) -> the names of the kernels there or within 7% of it, labelled once
    # a section that moves nothing over DDR (an infinite intensity) has no place on it
    for r in sorted((r for r in rows if math.isfinite(r["intensity"])), key=lambda r: r["intensity"]):
        y = r["attainable_flops"] / 1e12
        colour = BOUND_COLOURS.get(r["bound"], BOUND_COLOURS["compute"])
        ax.scatter([r["intensity"]], [y], s=28, zorder=3, color=colour)
        if ".backward" not in r["name"]:  # a backward kernel sits near its forward one
            label = r["name"].replace("layer0.", "").replace(".allreduce", "")  # every kernel is layer 0's
            near = [k for k in names if _near(k[0], r["intensity"]) and _near(k[1], y)]
            names.setdefault(near[0] if near else (r["intensity"], y), []).append(label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/B)")
    ax.set_ylabel("attainable (TFLOP/s)")
    legend_below(fig, ncols=2)
    shown = [b for b in BOUND_COLOURS if any(r["bound"] == b for r in rows)]
    ax.set_title(f"{title}: {kernels_title(rows)}\non {plat.name} (bound by: "
                 + ", ".join(f"{b} {BOUND_NAMES[b]}" for b in shown) + ")")
    tidy(fig)  # laid out before the kernels' names are placed
    place_labels(fig, ax, list(names), [_lines(", ".join(v), 40) for v in names.values()])
    return [_save(fig, out, "roofline", fmt)]


def _near(a: float, b: float) -> bool:
    """Whether two positive values are within 7% of each other (a dot's width on a log axis)."""
    return a > 0 and b > 0 and abs(math.log10(a / b)) < 0.03


def _lines(text: str, width: int) -> str:
    """`text` on lines of at most about `width` characters, broken after commas."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) or text


def read_table(path) -> list[dict]:
    """The rows of a sweep's summary table (CSV with a header: one column per swept key, such as
    migration.threshold, and one per summary figure, such as li), numbers as floats."""
    import csv
    import io

    from .files import read_bounded

    data = read_bounded(path, str(path), "sweep table")
    try:
        rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    except (csv.Error, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a CSV table ({e})") from None
    if not rows:
        raise InputError(f"{path}: the table has no rows")

    def value(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return v

    return [{k: value(v) for k, v in r.items()} for r in rows]


def _joined(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep(path, out, metric: str, x: str, y: str | None = None, fmt: str = "png") -> list[Path]:
    """A summary figure against one swept parameter (a line, with the range over repetitions and
    any other swept parameter shaded) or two (a heat map of the mean), from a sweep's summary
    table. An axis may be several swept keys joined by "+" (workload.type+workload.hot_rate): its
    values are their values together, as zipped keys give them."""
    _check_format(fmt)
    rows = read_table(path)
    cols = list(rows[0])
    for name, key in (("--metric", metric), ("--x", x), ("--y", y)):
        for part in (key.split("+") if key is not None and name != "--metric" else [key]):
            if part is not None and part not in cols:
                raise InputError(f"{path}: {name} {part}: no such column; the columns are {', '.join(cols)}")
    for key in (x, y):
        if key is not None and "+" in key:
            for r in rows:
                r[key] = " ".join(_joined(r[part]) for part in key.split("+"))
    rows = [r for r in rows if isinstance(r[metric], float) and not np.isnan(r[metric])]
    if not rows:
        raise InputError(f"{path}: --metric {metric}: no row has a number there")
    xs = sorted({r[x] for r in rows}, key=lambda v: (isinstance(v, str), v))
    if "+" in x:
        xs = list(dict.fromkeys(r[x] for r in rows))
    fig = _figure(8, 5)
    ax = fig.add_subplot()
    label = Path(path).stem
    if y is None:
        groups = [[r[metric] for r in rows if r[x] == v] for v in xs]
        pos = xs if all(isinstance(v, float) for v in xs) else list(range(len(xs)))
        ax.plot(pos, [np.mean(g) for g in groups], marker="o", color="#0072B2", label="mean")
        ax.fill_between(pos, [min(g) for g in groups], [max(g) for g in groups], color="#0072B2", alpha=0.2,
                        label="range")
        if pos is not xs:
            ax.set_xticks(pos, [str(v) for v in xs])
        ax.set_xlabel(column_label(x))
        ax.set_ylabel(column_label(metric))
        legend_beside(ax, title="over repetitions\nand other keys")
        name = f"sweep_{metric}_vs_{x}".replace("+", "_")
    else:
        ys = sorted({r[y] for r in rows}, key=lambda v: (isinstance(v, str), v))
        if "+" in y:  # (a joined axis keeps the table's order: zipped values belong together)
            ys = list(dict.fromkeys(r[y] for r in rows))
        grid = np.full((len(ys), len(xs)), np.nan)
        for j, vy in enumerate(ys):
            for i, vx in enumerate(xs):
                g = [r[metric] for r in rows if r[x] == vx and r[y] == vy]
                if g:
                    grid[j, i] = np.mean(g)
        _sweep_grid(fig, ax, grid, metric)
        ax.set_xticks(range(len(xs)), [f"{v:g}" if isinstance(v, float) else v for v in xs])
        ax.set_yticks(range(len(ys)), [f"{v:g}" if isinstance(v, float) else v for v in ys])
        ax.set_xlabel(column_label(x))
        ax.set_ylabel(column_label(y))
        name = f"sweep_{metric}_vs_{x}_{y}".replace("+", "_")
    ax.set_title(f"{label}: {metric} against {x}" + (f" and {y}" if y is not None else ""))
    if y is not None:
        _cell_values(fig, ax, grid)
    return [_save(fig, out, name.replace(".", "_"), fmt)]


def _sweep_grid(fig, ax, grid, metric: str) -> None:
    """The mean of `metric` on a sweep's grid as a heat map with its colour bar: discrete when every
    mean is an integer and they take at most 33 values (max - min <= 32: counts, such as tasks migrated)."""
    known = grid[~np.isnan(grid)]
    if known.size and np.all(known == np.round(known)) and known.max() - known.min() <= 32:
        cmap, norm = integer_colours("viridis", known.min(), known.max())
        im = ax.imshow(grid, cmap=cmap, norm=norm, origin="lower", aspect="auto")
        integer_colour_bar(fig, im, column_label(metric), ax=ax)
    else:
        im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
        fig.colorbar(im, ax=ax, label=column_label(metric))


def _cell_values(fig, ax, grid) -> None:
    """Each cell's value written in it, once the figure is laid out: smaller when it is wider than its
    cell, left out when even 5 points is (the colour bar still gives it)."""
    tidy(fig)
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    cell_w, cell_h = box.width / grid.shape[1], box.height / grid.shape[0]
    im = ax.images[0]

    def ink(v):  # black on light cells, white on dark ones
        r, g, b, _ = im.cmap(im.norm(v))
        return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"

    texts = [ax.text(i, j, f"{grid[j, i]:.3g}", ha="center", va="center", fontsize=7, color=ink(grid[j, i]))
             for j in range(grid.shape[0]) for i in range(grid.shape[1]) if not np.isnan(grid[j, i])]
    for size in (7, 6, 5):
        for t in texts:
            t.set_fontsize(size)
        if all(t.get_window_extent(renderer).width < cell_w - 2 and t.get_window_extent(renderer).height < cell_h - 1
               for t in texts):
            return
    for t in texts:
        t.remove()


def generation(path, out, fmt: str = "png") -> list[Path]:
    """A generation's key-value cache over the tokens, unit by unit, as a heat map (which unit fills, and
    when), and every token's time over the generation, mean and p99 marked."""
    with open_result_file(path) as f:
        title = _title(f)
        name = next(n for n in _CACHES if n in f)
        cache = f[name][()]
        what, unit = _CACHES[name]
        if unit is None:
            unit = "socket" if "socket" in f else "IPU"
        cycles = f["tokens/cycles"][()]
        token = f["tokens/token"][()] if "token" in f["tokens"] else np.arange(cycles.size)
        piped = "microbatch" in f["tokens"]  # a pipelined generation: a row per token of each micro-batch
        clock = float(f["summary"].attrs["clock_ghz"])
        machine = f.attrs.get("machine", "")
        machine = machine.decode() if isinstance(machine, bytes) else str(machine)
    if cycles.size == 0:
        raise InputError(f"{path}: no token was generated: nothing to draw")
    fig = _figure(15, 4.5)
    a1, a3, a2 = fig.subplots(1, 3)
    im = a1.imshow(cache.T, cmap="cividis", interpolation="none", aspect="auto", origin="lower")
    fig.colorbar(im, ax=a1, label=f"cache ({what})")
    xlabel = "row of tokens/ (a token of each micro-batch in turn)" if piped else "token (index)"
    a1.set_xlabel(xlabel)
    a1.set_ylabel(f"{unit} (index)")
    a1.set_title("the key-value cache")
    # the fullest unit against the mean: a cache that piles up on one unit shows here when a map's
    # single row would not
    tokens = np.arange(cache.shape[0])
    a3.plot(tokens, cache.max(axis=1), color="#D55E00", label=f"the fullest {unit}")
    a3.plot(tokens, cache.mean(axis=1), color="#0072B2", label="the mean")
    a3.set_xlabel(xlabel)
    a3.set_ylabel(f"cache ({what})")
    a3.set_title(f"LI at the end {cache[-1].mean() / max(1, cache[-1].max()):.3g}")
    legend_beside(a3)
    ms = cycles / (clock * 1e6)
    a2.plot(np.arange(len(ms)), ms, color="#0072B2", drawstyle="steps-mid", label="time of each token")
    # on the ipu and the rdu the first token's time holds the prompt's (each micro-batch's first, pipelined):
    # the figures are of the rest, as the summary's time per token is (the wafer's prefill is apart from its
    # tokens)
    first = token == 0
    prompt = machine in ("ipu", "rdu") and bool((~first).any())
    rest = ms[~first] if prompt else ms
    mean, p99 = float(rest.mean()), float(np.quantile(rest, 0.99, method="inverted_cdf"))
    a2.axhline(mean, color="#D55E00", label=f"mean {mean:.4g} ms")
    a2.axhline(p99, color="#CC79A7", ls="--", label=f"p99 {p99:.4g} ms")
    a2.set_xlabel(xlabel)
    a2.set_ylabel("time (ms)")
    if prompt and ms[0] > 10 * mean:  # a log axis shows the prompt's step and the others both
        a2.set_yscale("log")
    a2.set_title("every token's time")
    legend_beside(a2, title="after the first token" if prompt else "every token")
    fig.suptitle(f"{title}: the generation")
    return [_save(fig, out, "generation", fmt)]


def applicable(path) -> list[str]:
    """The kinds of plot a result file has the data for, in KINDS order."""
    from .roofline import model_of, values_of_file

    out = []
    with open_result_file(path) as f:
        frames = f["occupancy/queue_depth"].shape[0] if "occupancy/queue_depth" in f else 0
        if frames >= 1:
            out.append("heatmap")
        if frames >= 2:
            out.append("animation")
        if ("windows/li" in f and "series/busy" in f) or "series/interval_cycles" in f or (
                all(k in f for k in _IPU_TIMELINE) and f["supersteps/stage"].shape[0] > 0):
            out.append("timeline")
        if ("latency/histogram" in f and f["latency"].attrs.get("count", 0) > 0) or (
                "latency/tile_latency" in f and (f["latency/tile_latency"][()] >= 0).any()) or (
                "latency/microbatch_latency" in f and f["latency/microbatch_latency"].shape[0] > 0):
            out.append("latency")  # only when something finished
        if "units/busy_cycles" in f or "units/pcu_busy_cycles" in f or "units/tile_busy_cycles" in f:
            out.append("busy")
        if "units/link_messages" in f:
            out.append("links")
        if "sections" in f:
            out.append("gantt")
        gen = "tokens/cycles" in f and any(n in f for n in _CACHES) and f["tokens/cycles"].shape[0] > 0
    if model_of(values_of_file(path)) is not None:
        out.append("roofline")
    if gen:
        out.append("generation")
    return out


def _check_rows_agree(path) -> None:
    """A killed run's file (docs/results.md) may hold rows written after its last flush, which is
    data the run made; but a kill in the middle of a flush can leave one table a few rows longer
    than the tables beside it. Plots read them side by side: such a file is refused, by name."""
    with open_result_file(path) as f:
        if "provisional" not in f.get("summary", {}):
            return
        lengths = {}

        def visit(name, obj):
            if not (isinstance(obj, h5py.Dataset) and obj.maxshape and obj.maxshape[0] is None):
                return
            if obj.is_scale:
                lengths.setdefault(obj.name, set()).add(obj.shape[0])
            else:
                for scale in obj.dims[0].values():
                    lengths.setdefault(scale.name, set()).add(obj.shape[0])

        f.visititems(visit)
    uneven = sorted(name for name, n in lengths.items() if len(n) > 1)
    if uneven:
        raise InputError(f"{path}: the run was killed in the middle of a flush and its tables along "
                         f"{', '.join(uneven)} end at different rows; `meshsim report` reads the summary of its last "
                         "flush")


def plot(path, out=None, kinds=None, fmt: str = "png", cycle: int | None = None) -> list[Path]:
    """Every plot kind the file has data for (or `kinds`), written under `out` (default: a folder
    beside the file named after it). Returns the paths written."""
    read_summary(path)  # a meshsim result, or a clear error
    _check_format(fmt)
    _check_rows_agree(path)
    out = Path(out) if out is not None else Path(path).with_suffix("")
    have = applicable(path)
    wanted = have if not kinds else list(dict.fromkeys(kinds))
    unknown = [k for k in wanted if k not in KINDS]
    if unknown:
        raise InputError(f"--kind {', '.join(unknown)}: must be among {', '.join(KINDS)}")
    missing = [k for k in wanted if k not in have]
    if missing:
        raise InputError(f"{path}: no data for --kind {', '.join(missing)}; this file has "
                         f"{', '.join(have) or 'none (a run stopped before it wrote its totals)'}")
    if cycle is not None and "heatmap" not in wanted:
        raise InputError("--cycle: applies only to --kind heatmap")
    written = []
    for k in wanted:
        fn = globals()[k]
        written += fn(path, out, cycle=cycle, fmt=fmt) if k == "heatmap" else fn(path, out, fmt=fmt)
    return written


__all__ = ["plot", "applicable", "sweep", "read_table", *KINDS]

"""Layout of the figures (meshsim.plots): labels that never collide, legends beside the data, discrete
colour bars for integer data.

- `tidy` draws a figure and mends what it finds: tick labels that run into each other (fewer ticks
  on a numeric axis; names turned upright, then fewer shown, on an axis of names) and labels longer
  than their axes or titles wider than the figure (wrapped onto more lines: first the unit in
  parentheses onto a line of its own, kept whole). It draws again until nothing changes.
- `legend_beside` and `legend_below` put a legend outside the axes' area, where it covers no data
  (constrained layout makes room for it).
- `place_labels` writes a text beside each of many points, each where it collides with no other
  label and no other point, with a leader line when it had to be moved away.
- `integer_colours` is a discrete colour map for integer data: one colour per integer, the colour
  bar's ticks on integers.
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
from matplotlib.colors import BoundaryNorm
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator, LogLocator, MaxNLocator, NullFormatter
from matplotlib.transforms import Bbox

#: Pixels two labels keep between them.
GAP = 1.0


def integer_colours(name: str, lo, hi):
    """(cmap, norm) of colour map `name` with one colour per integer from `lo` to `hi`."""
    lo, hi = int(math.floor(lo)), int(math.ceil(hi))
    hi = max(hi, lo)
    n = hi - lo + 1
    return matplotlib.colormaps[name].resampled(n), BoundaryNorm(np.arange(lo - 0.5, hi + 1.0), n)


def integer_colour_bar(fig, mappable, label: str, **kw):
    """A colour bar of integer data drawn with `integer_colours`: ticks on integers, none between."""
    cb = fig.colorbar(mappable, label=label, **kw)
    cb.set_ticks(MaxNLocator(integer=True, nbins=8))
    cb.minorticks_off()
    return cb


def legend_beside(ax, **kw):
    """The legend of `ax` to the right of its area, top-aligned."""
    kw.setdefault("fontsize", 8)
    kw.setdefault("title_fontsize", 8)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


def legend_below(fig, handles=None, labels=None, **kw):
    """A legend of the figure under its axes, in as many columns as fit."""
    kw.setdefault("fontsize", 8)
    kw.setdefault("title_fontsize", 8)
    if handles is None:
        handles, labels = [], []
        for ax in fig.axes:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
    kw.setdefault("ncols", min(3, max(1, len(handles))))
    return fig.legend(handles, labels, loc="outside lower center", **kw)


def _extent(t: Text, renderer) -> Bbox:
    return Text.get_window_extent(t, renderer)  # an annotation's text alone, not its arrow


def _collide(a: Bbox, b: Bbox, gap: float = GAP) -> bool:
    return a.x0 < b.x1 + gap and b.x0 < a.x1 + gap and a.y0 < b.y1 + gap and b.y0 < a.y1 + gap


def _shown_tick_labels(axis, renderer) -> list:
    """The tick labels of `axis` drawn now: (text, extent), major and minor, within the view."""
    lo, hi = sorted(axis.get_view_interval())
    span = (hi - lo) * 1e-9
    out = []
    for ticks, locs in ((axis.get_major_ticks(len(axis.get_majorticklocs())), axis.get_majorticklocs()),
                        (axis.get_minor_ticks(len(axis.get_minorticklocs())), axis.get_minorticklocs())):
        for tick, loc in zip(ticks, locs, strict=False):
            if not lo - span <= loc <= hi + span:
                continue
            for t in (tick.label1, tick.label2):
                if t.get_visible() and t.get_text().strip():
                    out.append((t, _extent(t, renderer)))
    return out


def _ticks_collide(labels) -> bool:
    boxes = sorted((b for _, b in labels), key=lambda b: (b.x0, b.y0))
    return any(_collide(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _thin(axis, labels) -> bool:
    """Fewer or turned tick labels on `axis`, whose labels collide; False when nothing is left to do."""
    loc = axis.get_major_locator()
    n = len(labels)
    if isinstance(loc, FixedLocator):  # an axis of names: turn them upright (x), then show every other one
        shown = [t for t, _ in labels]
        if axis.axis_name == "x" and shown and shown[0].get_rotation() != 90:
            for t in axis.get_ticklabels():
                t.set_rotation(90)  # (slanted names' boxes would still overlap)
            return True
        if n < 2:
            return False
        for t in shown[1::2]:
            t.set_visible(False)
        return True
    if axis.get_scale() == "log":
        if any(t.get_text() for t in axis.get_ticklabels(minor=True)):
            axis.set_minor_formatter(NullFormatter())
            return True
        axis.set_major_locator(LogLocator(numticks=max(2, n // 2)))
        return n > 2
    if n <= 2:
        return False
    integral = all(float(x).is_integer() for x in axis.get_majorticklocs())
    axis.set_major_locator(MaxNLocator(nbins=max(1, n // 2), integer=integral, min_n_ticks=2))
    return True


def _wrapped(text: str) -> str:
    """`text` on one more line than it has, its lines of about equal length, a unit in parentheses at
    its end kept whole."""
    flat = " ".join(text.split())
    lines = text.count("\n") + 2
    cut = flat.rfind(" (")
    if cut > 0 and flat.endswith(")"):
        if "\n" not in text:  # first the unit on a line of its own
            return flat[:cut] + "\n" + flat[cut + 1:]
        flat = flat[:cut] + " " + flat[cut + 1:].replace(" ", "\u00a0")
    words = flat.split(" ")
    if len(words) < 2:
        return text
    goal = len(flat) / lines
    out, line = [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > goal and len(out) < lines - 1:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    out.append(line)
    return "\n".join(out).replace("\u00a0", " ")


def _too_long(label: Text, room: float, renderer, vertical: bool) -> bool:
    if not (label.get_visible() and label.get_text().strip()):
        return False
    box = _extent(label, renderer)
    return (box.height if vertical else box.width) > room


def tidy(fig, rounds: int = 8) -> None:
    """Draw `fig` and mend colliding tick labels and labels longer than their room (module doc),
    until a draw finds nothing to mend (or after `rounds` draws)."""
    for _ in range(rounds):
        fig.draw_without_rendering()  # lays the figure out and places every text, paints nothing
        renderer = fig.canvas.get_renderer()
        changed = False
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            for axis in (ax.xaxis, ax.yaxis):
                labels = _shown_tick_labels(axis, renderer)
                if len(labels) > 1 and _ticks_collide(labels):
                    changed |= _thin(axis, labels)
            box = ax.get_window_extent(renderer)
            for label, room, vertical in ((ax.yaxis.label, box.height, True), (ax.xaxis.label, box.width, False),
                                          (ax.title, box.width * 1.2, False)):
                if _too_long(label, room, renderer, vertical):
                    new = _wrapped(label.get_text())
                    changed |= new != label.get_text()
                    label.set_text(new)
        for title in fig.texts:  # the figure's title (suptitle) among them
            if _too_long(title, fig.bbox.width * 0.95, renderer, False):
                new = _wrapped(title.get_text())
                changed |= new != title.get_text()
                title.set_text(new)
        if not changed:
            return


def place_labels(fig, ax, points, texts, fontsize: float = 7) -> list:
    """An annotation of each point (data coordinates) with its text, each placed where its box meets
    no other label's and no other point, inside the axes (else no other label's; where the axes have
    no room left, just beside its point); far from its point, a leader line joins them. Call it last,
    after `tidy`: the places are worked out on the figure as it is laid out then. Returns the
    annotations."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    area = ax.get_window_extent(renderer).padded(-2)
    xy = ax.transData.transform(np.asarray(points, dtype=np.float64).reshape(-1, 2))
    dots = [Bbox.from_extents(x - 3, y - 3, x + 3, y + 3) for x, y in xy]
    placed, out = [], []
    scale = 72.0 / fig.dpi  # pixels to points
    for i in sorted(range(len(texts)), key=lambda k: (xy[k][0], xy[k][1])):
        probe = ax.text(0, 0, texts[i], fontsize=fontsize)
        box = _extent(probe, renderer)
        probe.remove()
        w, h = box.width, box.height
        others = [d for k, d in enumerate(dots) if k != i]
        found = None
        for avoid in (others, []):
            for dx, dy in _candidates(w, h, area.height):
                cand = Bbox.from_bounds(xy[i][0] + dx, xy[i][1] + dy, w, h)
                if (area.contains(cand.x0, cand.y0) and area.contains(cand.x1, cand.y1)
                        and not any(_collide(cand, b) for b in placed + avoid)):
                    found = (dx, dy, cand)
                    break
            if found:
                break
        dx, dy, cand = found or (4.0, 3.0, Bbox.from_bounds(xy[i][0] + 4, xy[i][1] + 3, w, h))
        far = abs(dy) > 2 * h or abs(dx) > w + 8
        ann = ax.annotate(texts[i], points[i], xytext=(dx * scale, dy * scale), textcoords="offset points",
                          fontsize=fontsize, ha="left", va="bottom", annotation_clip=False,
                          arrowprops=dict(arrowstyle="-", color="0.5", lw=0.5, shrinkA=0, shrinkB=3) if far else None)
        ann.set_in_layout(False)
        placed.append(cand)
        out.append(ann)
    return out


def _candidates(w: float, h: float, height: float):
    """Offsets (pixels, of a label's lower left corner from its point) nearest first: the four
    corners and the two sides, then ever further up and down."""
    yield from ((4, 3), (4, -3 - h), (-4 - w, 3), (-4 - w, -3 - h), (6, -h / 2), (-6 - w, -h / 2))
    step = h + 2 * GAP + 1
    for k in range(1, int(height / step) + 2):
        d = k * step
        yield from ((10, 3 + d), (10, -3 - h - d), (-10 - w, 3 + d), (-10 - w, -3 - h - d))

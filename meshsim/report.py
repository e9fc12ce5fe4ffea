"""Reading a result file's summary and printing it (docs/design.md, "Result files" and "Command line").

`read_summary` checks that a file is a meshsim result before trusting it; `format_summary` is the
one-screen summary shown at the end of a run and by `meshsim report`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from . import machine as machines
from .errors import InputError
from .output import SCHEMA_VERSION, open_result_file, plain, read_provisional

#: Attributes of /summary that every result has (docs/design.md, "Result files"); scripts rely on them.
STABLE_SUMMARY_KEYS = ("cycles", "n_units", "li", "percent_imbalance", "jain_index", "cv", "utilization",
                       "latency_mean_cycles", "latency_var_cycles2", "latency_p50_cycles", "latency_p99_cycles",
                       "latency_max_cycles", "injected", "refused", "completed", "in_system_at_end", "migrated",
                       "wall_seconds", "pe_cycles_per_second")


def read_summary(path) -> tuple[dict, dict]:
    """(root attributes, /summary attributes) of a result file, as plain Python values.

    Raises InputError naming the file when it is missing, not HDF5, or not a meshsim result.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such result file")
    try:
        f = open_result_file(p)
    except OSError as e:
        raise InputError(f"{p}: not a readable HDF5 file ({e.__class__.__name__}: {str(e).splitlines()[0]})") from None
    with f:
        root = {k: plain(v) for k, v in f.attrs.items()}
        if "schema_version" not in root or "summary" not in f:
            raise InputError(f"{p}: not a meshsim result file (no schema_version attribute or /summary group)")
        version = root["schema_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise InputError(f"{p}: not a meshsim result file (schema_version = {version!r} is not an integer)")
        if version > SCHEMA_VERSION:
            raise InputError(f"{p}: schema version {version} is newer than this meshsim reads "
                             f"(up to {SCHEMA_VERSION}); upgrade meshsim")
        summary = {k: plain(v) for k, v in f["summary"].attrs.items() if k != "description"}
        if not summary:  # a killed run: the summary of its last flush
            summary = read_provisional(f) or {}
    missing = [k for k in STABLE_SUMMARY_KEYS if k not in summary]
    if missing and summary:
        raise InputError(f"{p}: its summary lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}: "
                         "not a result this meshsim reads")
    if missing:
        raise InputError(_no_summary(p, root))
    return root, summary


def _no_summary(p: Path, root: dict) -> str:
    """What `read_summary` says of a file with no summary, a run killed before its first flush (or a
    resumed one killed before its first): the cycles it keeps, and whether the run can resume from a
    checkpoint of its own beside it (docs/results.md, "Reading what a stop left")."""
    import shlex

    from .checkpoint import checkpoint_path, cycles_of

    done = int(root.get("cycles_done", 0) or 0)
    if done:
        kept = f"the run was stopped before it wrote a summary: the file holds {done:,} cycles, but no figures of them"
    else:
        kept = "the run was stopped before its first flush: the file holds no cycles yet, and no summary"
    final = p.with_name(p.name[: -len(".incomplete.h5")] + ".h5") if p.name.endswith(".incomplete.h5") else p
    at = cycles_of(checkpoint_path(final), str(root["run_id"])) if root.get("run_id") else None
    if at is not None:
        then = f"it resumes from its checkpoint at cycle {at:,}: meshsim run --resume {shlex.quote(str(p))}"
    else:
        then = "it cannot resume (there is no checkpoint of it): run the scenario again"
    return f"{p}: {kept}; {then}"


def fmt(x, digits=4):
    """A figure as the summary shows it: 4 significant digits, thousands separated, n/a for NaN."""
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def step_split(s: dict) -> str:
    """How a step's time divides, chip and host (a file written before the split: empty)."""
    if "chip_seconds" not in s:
        return ""
    return (f"chip {fmt(s['chip_seconds'] * 1e3)} ms + host {fmt(s['host_seconds'] * 1e3)} ms; "
            f"{fmt(s['chip_samples_per_second'])} samples/s on the chip alone; ")


def format_summary(summary: dict, root: dict | None = None, path=None, regions: dict | None = None) -> str:
    """The one-screen summary of a run: whose, where, then the lines of its machine (the file's
    `machine` attribute, meshsim.machine.Machine.summary_lines)."""
    lines = []
    name = None
    if root is not None:
        state = "complete" if root.get("complete") else f"INCOMPLETE ({root.get('cycles_done', 0):,} cycles done)"
        lines.append(f"{root.get('scenario_name', '')}: {root.get('machine', '')}, {state}")
        name = root.get("machine")
    if path is not None:
        lines.append(f"result        {path}")
    lines += model_lines(root.get("model", ""), root.get("model_notes", "")) if root is not None else []
    if name is None:
        return "\n".join(lines + generic_lines(summary))
    own = machines.get(name).summary_lines(summary, regions)
    return "\n".join(lines + (generic_lines(summary) if own is None else own))


def model_lines(model: str, notes: str = "") -> list:
    """The model a run simulates, and what its config gave unasked or an override changed (the root
    attributes model and model_notes); none for a run without a transformer."""
    if not model:
        return []
    return [f"model         {model}"] + [f"              {line}" for line in str(notes).splitlines() if line]


def generic_lines(s: dict) -> list:
    """The summary lines every machine's figures allow (the stable names: docs/design.md, "Result files")."""
    return [
        f"cycles        {fmt(s['cycles'])} on {fmt(s['n_units'])} units",
        f"LI            {fmt(s['li'])}  (mean/max busy; {fmt(s['percent_imbalance'], 3)}% imbalance, "
        f"Jain {fmt(s['jain_index'])}, CV {fmt(s['cv'])})",
        f"utilisation   {fmt(s['utilization'])}",
        f"latency       mean {fmt(s['latency_mean_cycles'])}, variance {fmt(s['latency_var_cycles2'])}, "
        f"p50 {fmt(s['latency_p50_cycles'])}, p99 {fmt(s['latency_p99_cycles'])}, "
        f"max {fmt(s['latency_max_cycles'])} cycles",
        f"work          {fmt(s['injected'])} injected, {fmt(s['refused'])} refused, {fmt(s['completed'])} completed, "
        f"{fmt(s['in_system_at_end'])} in the system at the end",
        f"speed         {fmt(s['pe_cycles_per_second'] / 1e6, 4)} million unit-cycles/s; {fmt(s['wall_seconds'], 3)} s "
        "wall",
    ]


def read_regions(path) -> dict | None:
    """Per-region whole-run figures of a result file (name -> array), or None if its machine keeps
    none (meshsim.machine.Machine.read_regions). For a file `read_summary` has accepted."""
    with open_result_file(path) as f:
        name = plain(f.attrs.get("machine", ""))
        return machines.get(name).read_regions(f, path) if name else None


def to_json(data) -> str:
    """JSON text of nested dicts and lists, numpy scalars as plain numbers, NaN and infinities as
    null."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        v = plain(v)
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return json.dumps(clean(data), indent=2, sort_keys=False)


def summary_json(summary: dict, root: dict, regions: dict | None = None) -> str:
    """The summary as JSON (NaN written as null), with the file's provenance and any regions."""
    keep = ("schema_version", "meshsim_version", "machine", "scenario_name", "seed", "threads", "cycles_requested",
            "cycles_done", "complete", "model", "model_parameters", "model_parameters_without_embeddings",
            "model_notes")
    out = {"file": {k: root[k] for k in keep if k in root}, "summary": summary}
    if regions is not None:
        names = regions["name"]
        out["regions"] = {name: {k: v[i] for k, v in regions.items() if k != "name"} for i, name in enumerate(names)}
    return to_json(out)

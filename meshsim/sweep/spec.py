"""The sweep file (docs/sweeps.md): read and validate it, and expand it into its points.

Pure: nothing here runs a point, writes a file or needs Dask or h5py. `load_sweep` reads a sweep
file, reports every problem at once (InputError), and returns the `Sweep`: its points in order
(grid, then zip rows, then repetitions), each with its resolved overrides, seed and stable id.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from ..errors import InputError, closest
from ..params import PARAMS, aliases, sections
from ..scenario import load_scenario, parse_toml, read_scenario_text, toml_repr, unknown_key, unknown_section

#: Keys of the [sweep] table: (type, description). docs/sweeps.md lists the same.
SWEEP_KEYS = {
    "base": (str, "the base scenario file, relative to the sweep file (or an inline [base] table)"),
    "name": (str, "the sweep's name (default: the sweep file's stem)"),
    "output": (str, "the folder of the results, relative to the current folder (default results/sweeps/NAME)"),
    "repetitions": (int, "runs of every point, each with its own seed (default 1)"),
    "seeds": (str, '"per_point" (default) or "shared"'),
}
TABLES = ("sweep", "base", "set", "grid", "zip")
SEED_MODES = ("per_point", "shared")
SEED_KEY = "run.seed"
ID_LENGTH = 12
MAX_POINTS = 100_000
# Scenario keys a sweep may not set, and why.
UNSWEPT = {"run.threads": "the threads of each point are set with meshsim sweep --threads N (results do not "
                          "depend on them)"}


@dataclass(frozen=True)
class Point:
    """One run of a sweep: everything a worker needs, picklable, no open files.

    id: the stable point id, a hash of the resolved overrides (seed included).
    params: the swept (key, value) pairs ([grid] and [zip]) as resolved, in the sweep's key order.
    overrides: every (key, value) applied to the base: [set], then the swept values, then run.seed.
    base_text / base_path: the base scenario's text, and the absolute path that anchors a relative
        trace file wherever the worker started (the sweep file's, for an inline base).
    output: the absolute path of the point's result file.
    resolved: the point's fully resolved scenario as TOML; a worker refuses to run a point that it
        resolves differently (another meshsim version), and a rerun reruns a file that holds another.
    """

    id: str
    index: int
    repetition: int
    seed: int
    params: tuple
    overrides: tuple
    base_text: str
    base_path: str | None
    output: str
    resolved: str
    threads: int = 1


@dataclass
class Sweep:
    """A validated sweep file: its points in order (grid, then zip rows, then repetitions)."""

    path: str
    name: str
    text: str
    output: Path
    keys: list
    points: list
    repetitions: int
    seeds: str
    shape: dict = field(default_factory=dict)

    @property
    def summary_csv(self) -> Path:
        return self.output / "summary.csv"

    @property
    def summary_h5(self) -> Path:
        return self.output / "summary.h5"


@dataclass
class _Reading:
    """A sweep file as it is read: what it says so far, and every problem found (in the order they
    are reported). Values a problem was reported for are kept as given, or replaced by their
    defaults where later checks need them."""

    where: str
    text: str
    raw: dict
    meta: dict
    problems: list = field(default_factory=list)
    repetitions: int = 1
    seeds: object = "per_point"
    name: object = None
    folder: object = None
    folder_key: str = "sweep.output"
    base_text: str | None = None
    base_path: str | None = None
    base_label: str | None = None
    fixed: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    zipped: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)
    swept: list = field(default_factory=list)
    seed_given: bool = False


def load_sweep(path, output=None, threads: int = 1) -> Sweep:
    """Read and validate a sweep file and every one of its points (docs/design.md, "Sweeps").

    output: the results folder, overriding the file's `sweep.output`. threads: Numba threads per
    point. Raises InputError with every problem found, each naming the file, the key and what is
    allowed, before anything runs or is written.
    """
    r = _read(path)
    _check_tables(r)
    _check_settings(r, output)
    _find_base(r)
    _read_overrides(r)
    if r.base_text is None:
        raise InputError(r.problems)
    out_dir = Path(r.folder).expanduser().resolve() if r.folder is not None else None
    points = _expand(r, out_dir, threads)
    if out_dir is not None:
        wrong = _output_folder_problem(out_dir)
        if wrong:
            r.problems.append(f"{r.where}: {r.folder_key} = {toml_repr(r.folder)}: {wrong}")
    if r.problems:
        raise InputError(list(dict.fromkeys(r.problems)))
    return Sweep(path=r.where, name=r.name, text=r.text, output=out_dir, keys=r.swept, points=points,
                 repetitions=r.repetitions, seeds=r.seeds,
                 shape={"grid": [len(v) for v in r.grid.values()], "zip": _zip_length(r.zipped)})


def _read(path) -> _Reading:
    """The sweep file's text and TOML; InputError if it cannot be read or is not TOML."""
    where = str(path)
    text = read_scenario_text(path, where, "sweep file").replace("\r\n", "\n")
    raw = parse_toml(text, where)
    meta = raw.get("sweep", {}) if isinstance(raw.get("sweep"), dict) else {}
    return _Reading(where=where, text=text, raw=raw, meta=meta)


def _check_tables(r: _Reading) -> None:
    """Unknown tables, tables that are not tables, and the keys of [sweep] and their types."""
    where, problems = r.where, r.problems
    for table in r.raw:
        if table not in TABLES:
            near = closest(table, TABLES)
            hint = f" (did you mean [{near}]?)" if near else ""
            problems.append(f"{where}: [{table}]: unknown table{hint}; allowed: {', '.join(f'[{t}]' for t in TABLES)}")
        elif not isinstance(r.raw[table], dict):
            problems.append(f"{where}: {table} = {toml_repr(r.raw[table])}: must be a table, written [{table}]")
    for key, value in r.meta.items():
        if key not in SWEEP_KEYS:
            near = closest(key, SWEEP_KEYS)
            hint = f" (did you mean sweep.{near}?)" if near else ""
            problems.append(f"{where}: sweep.{key}: unknown key{hint}; allowed: {', '.join(SWEEP_KEYS)}")
        elif not isinstance(value, SWEEP_KEYS[key][0]) or isinstance(value, bool):
            problems.append(f"{where}: sweep.{key} = {toml_repr(value)}: must be "
                            f"{'an integer' if SWEEP_KEYS[key][0] is int else 'a string'}: {SWEEP_KEYS[key][1]}")


def _check_settings(r: _Reading, output) -> None:
    """sweep.repetitions, .seeds, .name and the results folder (`output`, else sweep.output)."""
    where, meta, problems = r.where, r.meta, r.problems
    repetitions = meta.get("repetitions", 1)
    if not isinstance(repetitions, int) or isinstance(repetitions, bool):
        repetitions = 1  # reported above
    elif not 1 <= repetitions <= 10_000:
        problems.append(f"{where}: sweep.repetitions = {repetitions}: must be an integer in [1, 10000]")
        repetitions = 1
    seeds = meta.get("seeds", "per_point")
    if isinstance(seeds, str) and seeds not in SEED_MODES:
        problems.append(f"{where}: sweep.seeds = {toml_repr(seeds)}: must be one of "
                        f"{', '.join(repr(s) for s in SEED_MODES)}")
    name = meta.get("name", Path(where).stem)
    if isinstance(name, str) and (not name.strip() or "/" in name or "\0" in name or name in (".", "..")):
        problems.append(f"{where}: sweep.name = {toml_repr(name)}: must be a non-empty name without '/'")
    folder, folder_key = (str(output), "-o") if output is not None else (meta.get("output"), "sweep.output")
    if not isinstance(folder, (str, type(None))):
        folder = None  # reported above
    elif folder is None and isinstance(name, str):
        folder = f"results/sweeps/{name}"
    if isinstance(folder, str) and (not folder.strip() or "\0" in folder):
        problems.append(f"{where}: {folder_key} = {toml_repr(folder)}: must name a folder, such as "
                        "results/sweeps/NAME")
        folder = None
    r.repetitions, r.seeds, r.name, r.folder, r.folder_key = repetitions, seeds, name, folder, folder_key


def _find_base(r: _Reading) -> None:
    """The base scenario: a file, or an inline [base] table; exactly one. Points carry its absolute
    path, so that a worker started in another folder finds a relative trace file; messages name it
    as written."""
    where, meta, raw = r.where, r.meta, r.raw
    if "base" in meta and "base" in raw:
        r.problems.append(f"{where}: sweep.base and [base]: give the base scenario once, as a file or inline")
    elif isinstance(meta.get("base"), str):
        r.base_label = str(Path(where).parent / meta["base"])
        r.base_path = str(Path(r.base_label).absolute())
        try:
            r.base_text = read_scenario_text(r.base_label, f"{where}: sweep.base = {toml_repr(meta['base'])}")
        except InputError as e:
            r.problems.extend(e.problems)
    elif isinstance(raw.get("base"), dict):
        r.base_text, r.base_path = tomli_w.dumps(raw["base"]), str(Path(where).absolute())
        r.base_label = f"{where} [base]"
    elif "base" not in meta:
        r.problems.append(f"{where}: no base scenario: give sweep.base = \"FILE.toml\" or an inline [base] table")


def _read_overrides(r: _Reading) -> None:
    """[set], [grid] and [zip]: their keys, the lengths of [zip]'s lists, keys given twice, a seed
    given with repetitions or sweep.seeds, and the number of points. A [zip] of unequal lists, or
    too many points, leaves nothing swept (the problem is reported)."""
    where, problems = r.where, r.problems
    fixed = _override_table(r.raw, "set", where, problems, lists=False)
    grid = _override_table(r.raw, "grid", where, problems, lists=True)
    zipped = _override_table(r.raw, "zip", where, problems, lists=True)
    if len({len(v) for v in zipped.values()}) > 1:
        problems.append(f"{where}: [zip]: every list must have the same length; the lengths are "
                        + ", ".join(f"{k} {len(v)}" for k, v in zipped.items()))
        zipped = {}
    seen = {}
    for table, keys in (("set", fixed), ("grid", grid), ("zip", zipped)):
        for key in keys:
            if key in seen:
                problems.append(f"{where}: {key}: is in both [{seen[key]}] and [{table}]; give each key once")
            seen.setdefault(key, table)
    r.swept = [*grid, *zipped]
    r.seed_given = SEED_KEY in seen
    if r.seed_given and r.repetitions > 1:
        problems.append(f"{where}: sweep.repetitions = {r.repetitions}: {SEED_KEY} is given in [{seen[SEED_KEY]}], "
                        "so every repetition would be the same run; leave repetitions at 1 or let the sweep derive "
                        "the seeds")
        r.repetitions = 1
    if r.seed_given and "seeds" in r.meta:
        problems.append(f"{where}: sweep.seeds = {toml_repr(r.seeds)}: applies only when the sweep derives the "
                        f"seeds; {SEED_KEY} is given in [{seen[SEED_KEY]}]")
    n_points = math.prod(len(v) for v in grid.values()) * (_zip_length(zipped) or 1) * r.repetitions
    if n_points > MAX_POINTS:
        problems.append(f"{where}: {n_points:,} points: at most {MAX_POINTS:,} in one sweep; split it into "
                        "several sweep files")
        grid, zipped = {}, {}
    r.fixed, r.grid, r.zipped, r.seen = fixed, grid, zipped, seen


def _zip_length(zipped: dict) -> int:
    """The rows of a [zip] table (its lists have one length), 0 without one."""
    return min(len(v) for v in zipped.values()) if zipped else 0


def _expand(r: _Reading, out_dir: Path | None, threads: int) -> list:
    """The points: the base with [set], then every combination of [grid] with every row of [zip],
    each repeated, validated as scenarios. Each problem is reported once however many points share
    it, and one that only a point's values cause names the point. Without a results folder (its
    problem is reported) the points are checked but not made."""
    where, problems = r.where, r.problems
    try:
        base = load_scenario(r.base_label, list(r.fixed.items()), text=r.base_text)
        base_seed, base_problems = base.get("run", "seed"), set()
    except InputError as e:
        base_seed, base_problems = 0, set(e.problems)
        problems.extend(_in_sweep(m, where, r.seen) for m in e.problems)
    combos = [dict(zip(r.grid, values, strict=True)) for values in itertools.product(*r.grid.values())]
    rows = [dict(zip(r.zipped, values, strict=True)) for values in zip(*r.zipped.values(), strict=True)] or [{}]
    points, ids = [], {}
    for combo in combos:
        for row in rows:
            swept_values = {**combo, **row}
            label = ", ".join(f"{k}={toml_repr(v)}" for k, v in swept_values.items()) or "the base scenario"
            for rep in range(r.repetitions):
                given = [*r.fixed.items(), *swept_values.items()]
                try:
                    sc = load_scenario(r.base_label, given, text=r.base_text)
                except InputError as e:
                    problems.extend(_in_sweep(m, where, r.seen) if m.startswith("override ") else
                                    f"{where}: at the point {label}: {m}" for m in e.problems
                                    if m not in base_problems)
                    break  # the other repetitions have the same problems
                params = tuple((k, _resolved(sc, k)) for k in r.swept)
                if r.seed_given:
                    seed = sc.get("run", "seed")
                else:
                    seed = derive_seed(base_seed, params, rep, r.seeds)
                    sc = load_scenario(r.base_label, [*given, (SEED_KEY, seed)], text=r.base_text)
                resolved_overrides = tuple((k, _resolved(sc, k)) for k, _ in given)
                if not r.seed_given:
                    resolved_overrides += ((SEED_KEY, seed),)
                pid = point_id(resolved_overrides)
                if pid in ids:
                    problems.append(f"{where}: the points {ids[pid]} and {label} (repetition {rep}) are the same run; "
                                    "remove the repeated values")
                    continue
                ids[pid] = f"{label} (repetition {rep})"
                if out_dir is not None:
                    points.append(Point(id=pid, index=len(points), repetition=rep, seed=seed, params=params,
                                        overrides=resolved_overrides, base_text=r.base_text, base_path=r.base_path,
                                        output=str(out_dir / "points" / f"{pid}.h5"), resolved=sc.resolved_toml(),
                                        threads=threads))
    return points


def _override_table(raw, table, where, problems, lists: bool) -> dict:
    """The `section.key` -> values of a [set], [grid] or [zip] table. Keys may be written dotted
    (`migration.threshold = [...]`, read by TOML as a nested table) or quoted ("migration.threshold")."""
    content = raw.get(table, {})
    if not isinstance(content, dict):
        return {}
    flat = {}
    for k, v in content.items():
        pairs = [(f"{k}.{k2}", v2) for k2, v2 in v.items()] if isinstance(v, dict) and "." not in k else [(k, v)]
        for key, value in pairs:
            if key in flat:
                problems.append(f"{where}: [{table}] {key}: given twice (quoted and dotted); give it once")
            flat[key] = value
    known = {p.path for p in PARAMS}
    renamed = aliases()
    out = {}
    for key, values in flat.items():
        if key in renamed:
            # a key's old name: the new one, with a warning (as a scenario's)
            warnings.warn(f"{where}: [{table}] {key} is now {renamed[key]}; the old name will go", FutureWarning,
                          stacklevel=2)
            if renamed[key] in flat:
                problems.append(f"{where}: [{table}] {key}: is the old name of {renamed[key]}, and the table sets "
                                f"both; keep {renamed[key]}")
                continue
            key = renamed[key]
        section, _, name = key.partition(".")
        if key not in known:
            why = unknown_section(section) if section not in sections() else unknown_key(section, name)
            problems.append(f"{where}: [{table}] {key}: {why}")
            continue
        if key in UNSWEPT:
            problems.append(f"{where}: [{table}] {key}: {UNSWEPT[key]}")
            continue
        if lists and (not isinstance(values, list) or not values):
            problems.append(f"{where}: [{table}] {key} = {toml_repr(values)}: must be a non-empty list of the "
                            f"values to run, e.g. {key} = [1, 2]")
            continue
        out[key] = values
    return out


def _in_sweep(message: str, where: str, tables: dict) -> str:
    """A scenario problem restated for the sweep file: `override KEY=V: ...` names its table."""
    if message.startswith("override "):
        shown = message[len("override "):]
        key = shown.partition("=")[0]
        at = shown.find(f": {key} = ")  # the usual "KEY = VALUE: what is allowed": say the key once
        return f"{where}: [{tables.get(key, 'set')}] {shown[at + 2:] if at >= 0 else shown}"
    return message


def _resolved(scenario, key: str):
    section, _, name = key.partition(".")
    return scenario.get(section, name)


def _output_folder_problem(out: Path) -> str | None:
    """Why no results can be written in `out`, or None."""
    from ..files import kind_of

    for p in (out, *out.parents):
        try:
            mode = os.stat(p).st_mode
        except OSError:  # not there (yet)
            continue
        if not stat.S_ISDIR(mode):
            return f"{p} is {'a file' if stat.S_ISREG(mode) else kind_of(mode)}, not a folder"
        if not os.access(p, os.W_OK | os.X_OK):
            return f"cannot write in {p} (permission denied)"
        return None
    return None


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def point_id(overrides) -> str:
    """The stable id of a point: the first 12 hex digits of SHA-256 over its resolved overrides
    (key order does not matter; 2 and 2.0 for a float key are the same value once resolved)."""
    return hashlib.sha256(_canonical(sorted([k, v] for k, v in overrides)).encode()).hexdigest()[:ID_LENGTH]


def derive_seed(base_seed: int, params, repetition: int, mode: str = "per_point") -> int:
    """A point's seed (docs/sweeps.md, "Points, ids and seeds"). "per_point": from SHA-256 over the
    base seed, the swept values and the repetition, so every run of the sweep draws its own numbers;
    "shared": the base seed plus the repetition, so all points of a repetition see the same draws
    (paired comparisons)."""
    if mode == "shared":
        return (base_seed + repetition) % 2**63
    digest = hashlib.sha256(_canonical([base_seed, sorted([k, v] for k, v in params), repetition]).encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)

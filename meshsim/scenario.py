"""Scenario files: read a TOML scenario, apply command-line overrides, fill defaults, validate.

docs/design.md, "Scenario files". Everything about a key (type, unit, default, range, when it
applies) comes from the parameter table in `meshsim.params`. Validation collects every problem it
finds and raises one `InputError`; each problem is one line naming where (the file, or the
override), the key path, the bad value and what is allowed.

The only filesystem access here is reading the scenario, its preset file and its model config
(whether a trace file exists is the mesh's check, meshsim/mesh/checks.py).
"""

from __future__ import annotations

import datetime
import inspect
import json
import math
import os
import re
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from . import machine as machines
from . import modelconfig
from .errors import InputError
from .errors import closest as _closest
from .params import (
    PARAMS,
    SECTIONS,
    Param,
    aliases,
    format_choices,
    format_condition,
    format_range,
    param,
    presets_of,
    section_params,
)
from .transformer import PRECISION_BYTES


def _keys(section: str) -> tuple:
    """The keys of a section, as the table stands (a machine registered since adds its own)."""
    return tuple(p.name for p in section_params(section))


_TEXT_NAME = "<scenario>"


@dataclass(frozen=True)
class Scenario:
    """A validated scenario (docs/design.md, "Scenario files").

    path: the scenario file as given, or None when built from text or a dict.
    source_text: the file's original text (echoed into result files).
    values: section -> key -> value, every key of the parameter table, defaults filled in, in
        table order; floats are floats and regions are lists of 4-int lists.
    overrides: the ("section.key", value) pairs applied on top of the file, in order.
    model_notes: what workload.model_config's config.json gave that the scenario did not choose (its
        seq_len, read from the model's longest sequence) and what a command-line override changed of
        the model it describes, one line each (docs/design.md, "Models from a config.json").
    """

    path: str | None
    source_text: str
    values: dict
    overrides: list = field(default_factory=list)
    model_notes: tuple = ()

    def get(self, section: str, key: str):
        """The resolved value of `section.key`; KeyError if the key is not in the table."""
        param(section, key)
        return self.values[section][key]

    @property
    def name(self) -> str:
        """The run's name: run.name, else the scenario file's stem, else "scenario"."""
        if self.values["run"]["name"]:
            return self.values["run"]["name"]
        if self.path:
            return Path(self.path).stem
        return "scenario"

    @property
    def trace_path(self) -> str | None:
        """The trace file for a trace workload, resolved relative to the scenario's folder."""
        if self.values["workload"]["type"] != "trace":
            return None
        return resolve_relative(self.values["workload"]["trace_file"], self.path)

    def hot_regions(self) -> list[tuple[int, int, int, int]]:
        """The hot rectangles (row0, col0, row1, col1), half-open; the default one if none given.

        The default is one region in the middle of the grid, a quarter of each side (at least
        one PE). See docs/mesh.md, "Rate maps".
        """
        regions = self.values["workload"]["hot_regions"]
        if regions:
            return [tuple(r) for r in regions]
        rows, cols = self.values["machine"]["rows"], self.values["machine"]["cols"]
        return [default_hot_region(rows, cols)]

    def resolved_toml(self) -> str:
        """The resolved values as TOML text; tomllib reads it back to `values` exactly."""
        return tomli_w.dumps(self.values)


def default_hot_region(rows: int, cols: int) -> tuple[int, int, int, int]:
    """The hot region used when workload.hot_regions is empty: centred, a quarter of each side."""
    h, w = max(1, rows // 4), max(1, cols // 4)
    r0, c0 = (rows - h) // 2, (cols - w) // 2
    return (r0, c0, r0 + h, c0 + w)


def parse_overrides(items) -> list[tuple[str, object]]:
    """Parse command-line overrides `section.key=value` into ("section.key", value) pairs.

    docs/design.md, "Scenario files" and "Command line". The value is read as a TOML value (`64`,
    `0.1`, `true`, `[[0, 0, 8, 8]]`, `"x"`); if it is not valid TOML it is taken as a bare string, so
    `migration.policy=none` works. Raises InputError listing every malformed item. Whether the
    key exists is checked by `load_scenario`.
    """
    pairs, problems = _parse_override_items(items)
    if problems:
        raise InputError(problems)
    return [(key, value) for key, value, _ in pairs]


def load_scenario(path, overrides=(), *, text: str | None = None) -> Scenario:
    """Read, override, complete and validate a scenario (docs/design.md, "Scenario files").

    path: the TOML file (str or Path); when `text` is given it is parsed instead and `path` is
        only used in messages and to resolve the trace file (None: relative to the current
        folder).
    overrides: `section.key=value` strings, or ("section.key", value) pairs; they win over the
        file.
    Raises InputError with every problem found.
    """
    where = str(path) if path is not None else _TEXT_NAME
    if text is None:
        if path is None:
            raise InputError([f"{_TEXT_NAME}: no scenario file or text given"])
        text = read_scenario_text(path, where)
    raw = parse_toml(text, where)
    return _build(raw, None if path is None else str(path), text, overrides)


def scenario_from_dict(d: dict, path=None, overrides=()) -> Scenario:
    """Validate a scenario given as a dict shaped like a parsed TOML file (for tests and sweeps).

    Same checks and messages as `load_scenario`; `path`, if given, names the scenario in messages
    and anchors a relative trace file.
    """
    where = str(path) if path is not None else _TEXT_NAME
    if not isinstance(d, dict):
        raise InputError([f"{where}: a scenario must be a table of sections, not {toml_repr(d)}"])
    try:
        source_text = tomli_w.dumps(d)
    except (TypeError, ValueError):
        # Values TOML cannot hold (None, objects) are reported by validation below.
        source_text = ""
    return _build(d, None if path is None else str(path), source_text, overrides)


# ---------------------------------------------------------------------------------------------
# Reading


#: How deep a scenario's (or sweep's) arrays and tables may nest: the deepest key meshsim reads,
#: machine.hot_regions, nests 2 below its section.
MAX_DEPTH = 16
#: The longest run.name: NAME.checkpoint.h5.part, the longest name a run writes, then fits the 255
#: bytes a file system allows a file name.
MAX_NAME_BYTES = 200
#: The integers a scenario may hold: those of 64 bits (every integer key fits one).
INT_RANGE = (-(2**63), 2**64 - 1)


def read_scenario_text(path, where: str, what: str = "scenario file") -> str:
    """A scenario (or sweep) file's text: a regular file of at most files.LIMITS[what] bytes, in
    UTF-8; InputError naming `where` otherwise."""
    from .files import read_bounded

    data = read_bounded(path, where, what)
    try:
        return data.decode("utf-8-sig")  # tolerate the byte-order mark some editors write
    except UnicodeDecodeError as e:
        raise InputError([f"{where}: not UTF-8 text (bad byte at offset {e.start})"]) from None


def parse_toml(text: str, where: str) -> dict:
    """The tables of a TOML text, within MAX_DEPTH levels and 64-bit integers; InputError naming
    `where` and what is wrong otherwise (a TOML error, nesting deeper than Python's parser goes, an
    integer of more digits than Python converts)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError([f"{where}: invalid TOML: {e}"]) from None
    except RecursionError:
        raise InputError([f"{where}: invalid TOML: arrays or tables nested too deep to read; a scenario nests at "
                          f"most {MAX_DEPTH} levels"]) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError([f"{where}: invalid TOML: {str(e).splitlines()[0]}; a scenario's integers have at most 64 "
                          "bits"]) from None
    problems: list[str] = []
    _check_bounds(raw, where, "", 0, problems)
    if problems:
        raise InputError(problems)
    return raw


def _bounds_problems(value) -> list:
    problems: list[str] = []
    _check_bounds(value, "", "", 0, problems)
    return problems


def _check_bounds(value, where: str, key: str, depth: int, problems: list) -> None:
    """Problems of a parsed value nested deeper than MAX_DEPTH or holding an integer beyond 64 bits."""
    if len(problems) >= 20:
        return
    if depth > MAX_DEPTH:
        problems.append(f"{where}: {key}: nested more than {MAX_DEPTH} levels deep; no scenario key nests so deep")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _check_bounds(v, where, f"{key}.{k}" if key else str(k), depth + 1, problems)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_bounds(v, where, f"{key}[{i}]", depth + 1, problems)
    elif isinstance(value, int) and not isinstance(value, bool) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        digits = len(str(abs(value)))
        problems.append(f"{where}: {key} = an integer of {digits} digits: beyond 64 bits; no scenario key takes one "
                        "so large")


def _parse_override_items(items):
    """(section.key, value, item-as-shown) triples and the problems of the malformed items."""
    if isinstance(items, str):
        # A single string is one item, not a sequence of characters.
        items = [items]
    pairs, problems = [], []
    for item in items:
        if isinstance(item, str):
            key, eq, value_text = item.partition("=")
            key = key.strip()
            if not eq:
                problems.append(
                    f"override {item}: expected section.key=value, e.g. machine.rows=64"
                )
                continue
            section, dot, name = key.partition(".")
            if not dot or not section or not name:
                problems.append(
                    f"override {item}: the key \"{key}\" must be written section.key, "
                    "e.g. machine.rows=64"
                )
                continue
            pairs.append((key, _parse_value(value_text.strip()), item))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            key, value = item
            shown = f"{key}={toml_repr(value)}"
            if "." not in key:
                problems.append(f"override {shown}: the key must be written section.key")
                continue
            pairs.append((key.strip(), value, shown))
        else:
            problems.append(
                f"override {item!r}: expected a section.key=value string or a (key, value) pair"
            )
    return pairs, problems


def _parse_value(text: str):
    """A TOML value if `text` is one, else the text itself as a bare string."""
    try:
        parsed = tomllib.loads("v = " + text)
    except (ValueError, RecursionError):  # not TOML (ValueError holds TOMLDecodeError), or beyond it
        return text
    if _bounds_problems(parsed):
        return text
    # A value with newlines could smuggle in more keys; only a single clean value counts.
    if list(parsed) != ["v"]:
        return text
    return parsed["v"]


# ---------------------------------------------------------------------------------------------
# Building and validating


def _build(raw: dict, path: str | None, source_text: str, overrides) -> Scenario:
    where = path if path is not None else _TEXT_NAME
    problems: list[str] = []
    given: dict[str, object] = {}
    origin: dict[str, str] = {}

    override_pairs, override_problems = _parse_override_items(overrides)
    renamed = aliases()

    def new_name(key: str, said: str) -> str:
        # a key's old name: the new one, with a warning
        if key in renamed:
            warnings.warn(f"{said}: {key} is now {renamed[key]}; the old name will go", FutureWarning, stacklevel=4)
            return renamed[key]
        return key

    for section, content in raw.items():
        if section not in SECTIONS:
            problems.append(_unknown_top_level(where, section, content))
            continue
        if not isinstance(content, dict):
            problems.append(
                f"{where}: {section} = {toml_repr(content)}: must be a table, "
                f"written as a [{section}] section"
            )
            continue
        content = _one_name_each(section, content, renamed, where, problems)
        for key, value in content.items():
            full = new_name(f"{section}.{key}", where)
            if full.partition(".")[2] in _keys(section):
                given[full] = value
                origin[full] = where
            else:
                problems.append(f"{where}: {section}.{key}: {unknown_key(section, key)}")

    problems.extend(override_problems)
    applied = []
    for key, value, shown in override_pairs:
        key = new_name(key, f"override {shown}")
        section, _, name = key.partition(".")
        if section not in SECTIONS:
            problems.append(f"override {shown}: {key}: {unknown_section(section)}")
        elif name not in _keys(section):
            problems.append(f"override {shown}: {key}: {unknown_key(section, name)}")
        else:
            given[key] = value
            origin[key] = f"override {shown}"
            applied.append((key, value))

    values: dict[str, dict] = {s: {} for s in SECTIONS}
    valid: dict[str, bool] = {}
    for p in PARAMS:
        if p.path in given:
            value = given[p.path]
            wrong = _check_value(p, value)
            valid[p.path] = wrong is None
            if wrong is not None:
                problems.append(f"{origin[p.path]}: {p.path} = {toml_repr(value)}: {wrong}")
            else:
                value = _normalise(p, value)
            values[p.section][p.name] = value
        else:
            values[p.section][p.name] = p.default_value()
            valid[p.path] = True

    mtype = values["machine"]["type"] if valid["machine.type"] else None
    presets, default_preset = presets_of(mtype) if mtype is not None else ({}, "")
    if presets and valid.get("machine.preset"):
        # The preset fills the chip's keys the scenario leaves out (docs/rdu.md, docs/ipu.md, "Presets").
        if "machine.preset" not in given:
            values["machine"]["preset"] = default_preset
        name = values["machine"]["preset"]
        if name in presets:
            for key, value in presets[name].items():
                if f"machine.{key}" not in given:
                    values["machine"][key] = value
        else:
            problems.append(f"{origin['machine.preset']}: machine.preset = {toml_repr(name)}: is not a preset of "
                            f"the {mtype}; when machine.type is \"{mtype}\" it must be one of "
                            f"{format_choices(presets)}")

    problems.extend(_apply_preset_file(values, valid, given, origin, path))
    model_notes: list[str] = []
    problems.extend(_apply_model_config(values, valid, given, origin, path, model_notes))

    for p in PARAMS:
        # A key left at its default changes nothing where it does not apply; accepting it lets
        # resolved_toml(), which lists every key, be loaded again as a scenario.
        if p.path in given and p.applies_when is not None and given[p.path] != p.default_value():
            unmet = _unmet_condition(p, values, valid)
            if unmet is not None:
                key, allowed, actual = unmet
                problems.append(
                    f"{origin[p.path]}: {p.path} = {toml_repr(given[p.path])}: applies only when "
                    f"{format_condition((key, allowed))} (it is {toml_repr(actual)})"
                )

    problems.extend(_check_combinations(values, valid, given, origin, where, path))

    if problems:
        raise InputError(problems)
    return Scenario(path=path, source_text=source_text, values=values, overrides=applied,
                    model_notes=tuple(model_notes))


#: Machine keys a preset file may not set: they choose the machine and its presets.
_NOT_IN_PRESET_FILE = ("type", "preset", "preset_file")


def _one_name_each(section: str, content: dict, renamed: dict, where: str, problems: list) -> dict:
    """A section's keys with each key that a file sets under its old name and its new one both kept
    once: the one that is not the key's default (a resolved scenario written before the rename lists
    every key under both names, one of them at its default), either when they agree; both set to
    different values is a problem."""
    out = dict(content)
    for old, new in renamed.items():
        o_section, _, o_key = old.partition(".")
        n_section, _, n_key = new.partition(".")
        if o_section != section or n_section != section or o_key not in out or n_key not in out:
            continue
        try:
            default = param(n_section, n_key).default_value()
        except KeyError:
            continue
        if out[o_key] == out[n_key] or out[o_key] == default:
            del out[o_key]
        elif out[n_key] == default:
            del out[n_key]
        else:
            problems.append(f"{where}: {old} = {toml_repr(out[o_key])}: is the old name of {new}, which the file sets "
                            f"to {toml_repr(out[n_key])}; keep {new}")
            del out[o_key]
    return out


def _apply_preset_file(values, valid, given, origin, path) -> list[str]:
    """Fill the machine keys the scenario leaves out from machine.preset_file, a TOML file with a [machine]
    table (what `meshsim calibrate` writes; a [calibration] table beside it says how it was fitted and is not
    read here). It wins over machine.preset; a key the scenario sets wins over both (docs/design.md,
    "Calibration")."""
    key = "machine.preset_file"
    file = values["machine"]["preset_file"]
    if not valid[key] or not file:
        return []
    if all(f"machine.{k}" in given for k in _keys("machine") if k not in _NOT_IN_PRESET_FILE):
        return []  # a scenario that sets every key (a result file's resolved scenario) does not read it
    shown = f"{origin[key]}: {key} = {toml_repr(file)}"
    try:
        raw = parse_toml(read_scenario_text(resolve_relative(file, path), shown, "scenario file"), shown)
    except InputError as e:
        valid[key] = False
        return list(e.problems)
    problems = [f"{shown}: [{name}]: a preset file holds a [machine] table (and a [calibration] table that says "
                "how it was fitted), nothing else" for name in raw if name not in ("machine", "calibration")]
    table = raw.get("machine", {})
    if not isinstance(table, dict):
        return problems + [f"{shown}: machine = {toml_repr(table)}: must be a [machine] table"]
    for k, v in table.items():
        if k not in _keys("machine") or k in _NOT_IN_PRESET_FILE:
            problems.append(f"{shown}: machine.{k}: " + ("a preset file may not set it (it sets the keys of the "
                            "machine a scenario chose)" if k in _NOT_IN_PRESET_FILE else unknown_key("machine", k)))
            continue
        p = param("machine", k)
        wrong = _check_value(p, v)
        if wrong is not None:
            problems.append(f"{shown}: machine.{k} = {toml_repr(v)}: {wrong}")
            continue
        if p.path not in given:
            values["machine"][k] = _normalise(p, v)
            origin[p.path] = shown
    return problems


def _apply_model_config(values, valid, given, origin, path, notes: list) -> list[str]:
    """Take the model from workload.model_config's config.json (docs/design.md, "Models from a
    config.json"): it gives every key of the model's shape, and a scenario file that sets one of them to
    another value is refused; a command-line override wins and is said in `notes`, as is a seq_len taken
    from the config. seq_len and precision are the run's: the scenario's win. Keys that do not apply to
    the machine are left alone. A scenario that sets every key of modelconfig.RESOLVED_KEYS (as a
    result file's resolved scenario does) does not read it. Returns the problems found, one line each."""
    key = "workload.model_config"
    file = values["workload"]["model_config"]
    if not valid[key] or not file or _unmet_condition(param("workload", "model_config"), values, valid):
        return []
    applicable = [k for k in modelconfig.KEYS if _unmet_condition(param("workload", k), values, valid) is None]
    if all(f"workload.{k}" in given for k in applicable if k in modelconfig.RESOLVED_KEYS):
        return []  # a resolved scenario: its config may be elsewhere by now, and it says the model itself
    shown = f"{origin[key]}: {key} = {toml_repr(file)}"
    try:
        filled, fields = modelconfig.read(resolve_relative(file, path), shown)
    except InputError as e:
        valid[key] = False
        return list(e.problems)
    problems = []
    for k in applicable:
        p = param("workload", k)
        wrong = _check_value(p, filled[k]) if k in filled else None
        if k not in filled or wrong is not None:
            if wrong is not None:
                valid[p.path] = False
                problems.append(f"{shown}: its {fields.get(k, k)} gives {p.path} = {toml_repr(filled[k])}: {wrong}")
            continue
        theirs = _normalise(p, filled[k])
        if p.path in given or (k == "ffn_width" and "workload.ffn_multiplier" in given):
            problems.extend(_against_the_config(k, theirs, fields[k], values, valid, given, origin, shown, notes))
            continue
        values["workload"][k] = theirs
        origin[p.path] = shown
        if k == "seq_len":
            notes.append(f"workload.seq_len = {theirs:,}: from the config's {fields[k]}, the longest sequence the "
                         "model takes (set workload.seq_len for shorter ones)")
    return problems


def _against_the_config(k, theirs, field, values, valid, given, origin, shown, notes) -> list[str]:
    """A model key the scenario sets that the config gives too: the run's own choice (seq_len,
    precision), the same value, an override from the command line (kept, and said in `notes`), or a
    contradiction (the problem). ffn_multiplier stands for ffn_width when only it is set."""
    if k not in modelconfig.SHAPE_KEYS:
        return []
    w = values["workload"]
    mine_key = f"workload.{k}" if f"workload.{k}" in given else "workload.ffn_multiplier"
    if not valid.get(mine_key, True) or not valid.get("workload.hidden_size", True):
        return []
    mine, theirs_shown = w[mine_key.split(".")[1]], toml_repr(theirs)
    if mine_key == "workload.ffn_multiplier":
        same = mine * w["hidden_size"] == theirs
        theirs_shown = f"{theirs_shown} (a multiplier of {theirs / w['hidden_size']:.4g})"
    elif k == "head_dim" and valid.get("workload.n_heads", True):
        width = w["hidden_size"] // w["n_heads"]
        same = (mine or width) == (theirs or width)
    else:
        same = mine == theirs
    if same:
        if mine_key == "workload.ffn_multiplier":
            w["ffn_width"] = theirs
        return []
    if origin[mine_key].startswith("override "):
        notes.append(f"{mine_key} = {toml_repr(mine)}: overridden on the command line; the config's {field} gives "
                     f"{theirs_shown}, so the model simulated is not the config's")
        return []
    return [f"{origin[mine_key]}: {mine_key} = {toml_repr(mine)}: contradicts {shown}, whose {field} gives "
            f"{theirs_shown}; the config is the model: leave {mine_key} out of the scenario, or give it on the "
            f"command line ({mine_key}={toml_repr(mine)}) to simulate another model on purpose"]


def _check_value(p: Param, value) -> str | None:
    """What is wrong with `value` for `p` (the text after "key = value: "), or None if fine."""
    unit = f" ({p.unit})" if p.unit else ""
    if p.type == "int":
        expected = f"must be an integer in {format_range(p)}{unit}" if p.range else (
            f"must be an integer{unit}")
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                # A common slip: 100.0 is a TOML float, and ints must stay exact.
                return f"{expected}; write {int(value)} without a decimal point"
            return expected
        if p.range and not (p.range[0] <= value <= p.range[1]):
            return expected
        return None
    if p.type == "float":
        expected = f"must be a number in {format_range(p)}{unit}" if p.range else (
            f"must be a number{unit}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return expected
        # Comparisons with nan are false, so nan falls out here as out of range.
        if p.range and not (p.range[0] <= value <= p.range[1]):
            return expected
        if not p.range and not math.isfinite(value):
            return expected
        return None
    if p.type == "str":
        if p.choices is not None:
            expected = f"must be one of {format_choices(p.choices)}"
            if not isinstance(value, str):
                return expected
            if value not in p.choices:
                hint = _VALUE_HINTS[p.path](value) if p.path in _VALUE_HINTS else None
                if hint:
                    return f"{expected}; {hint}"
                match = _closest(value, p.choices)
                return expected + (f'; did you mean "{match}"?' if match else "")
            return None
        if not isinstance(value, str):
            return "must be a string"
        return None
    if p.type == "bool":
        if not isinstance(value, bool):
            return "must be true or false"
        return None
    if p.type == "ints":
        expected = f"must be a list of integers in {format_range(p)}{unit}"
        if not isinstance(value, list):
            return expected
        for i, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, int) or not (p.range[0] <= x <= p.range[1]):
                return f"{expected}; item {i} is {toml_repr(x)}"
        if len(value) > 4096:
            return f"{expected}, at most 4096 of them"
        return None
    if p.type == "regions":
        expected = f"must be a list of [row0, col0, row1, col1] lists of 4 integers{unit}"
        if not isinstance(value, list):
            return expected
        for i, region in enumerate(value):
            if not (
                isinstance(region, list)
                and len(region) == 4
                and all(isinstance(x, int) and not isinstance(x, bool) for x in region)
            ):
                return f"{expected}; region {i} is {toml_repr(region)}"
        return None
    raise AssertionError(f"parameter {p.path} has unknown type {p.type!r}")


def _normalise(p: Param, value):
    """The value in its resolved form: floats as float, regions as fresh lists."""
    if p.type == "float":
        return float(value)
    if p.type == "regions":
        return [list(region) for region in value]
    if p.type == "ints":
        return list(value)
    return value


def _unmet_condition(p: Param, values, valid):
    """The outermost applies_when condition of `p` that does not hold, or None.

    Walks the chain (work_min_cycles needs work_distribution "uniform", which needs a Bernoulli
    workload type) from its root, so the message names the key the user should look at first. A
    condition on a key that is itself invalid is not judged: that key has its own message.
    """
    chain = []
    condition = p.applies_when
    while condition is not None:
        chain.append(condition)
        section, _, name = condition[0].partition(".")
        condition = param(section, name).applies_when
    for key, allowed in reversed(chain):
        if not valid[key]:
            return None
        section, _, name = key.partition(".")
        actual = values[section][name]
        if actual not in allowed:
            return key, allowed, actual
    return None


def _check_combinations(values, valid, given, origin, where, path) -> list[str]:
    """Problems that involve more than one key (docs/mesh.md, "Grid and names": the parameters).

    Each check runs only when every key it reads is itself valid, so one slip gives one message.
    """
    problems = []

    def ok(*keys):
        return all(valid[k] for k in keys)

    def get(key):
        section, _, name = key.partition(".")
        return values[section][name]

    def shown(key):
        # Saying "(default)" tells the user they never wrote the value that is in conflict.
        text = toml_repr(get(key))
        if key in given:
            return text
        return f"{text} (from the model config)" if key in origin else f"{text} (default)"

    def at(*keys):
        for k in keys:
            if k in origin:  # given, or filled from the model config
                return origin[k]
        return where

    def add(blamed, others, message, *, text=None):
        # text: the whole problem after its place, where it is not "KEY = VALUE: message"
        said = text if text is not None else f"{blamed} = {shown(blamed)}: {message}"
        problems.append(f"{at(blamed, *others)}: {said}")

    opt, master, tr, prec = "workload.optimizer", "workload.master_weights", "workload.training", "workload.precision"
    if ok(opt, tr) and get(opt) != "none" and not get(tr):
        add(opt, [tr], f"applies only with training ({tr} = {shown(tr)}): inference updates no weights")
    if ok(master, opt) and get(master) == "fp32" and get(opt) == "none":
        add(master, [opt], f"needs an optimizer to update them ({opt} = {shown(opt)}): \"sgd\" or \"adam\"")
    if ok(master, prec) and get(master) == "fp32" and PRECISION_BYTES.get(get(prec), 0) >= 4:
        add(master, [prec], f"keeps an fp32 copy beside a narrower type, but {prec} = {shown(prec)} is 4 bytes "
                            "already: use \"same\", or a 16-bit precision")

    ctx = "workload.context"
    if ok(ctx, tr) and get(ctx) and get(tr):
        add(ctx, [tr], f"a key-value cache serves inference; a training step ({tr} = {shown(tr)}) keeps none: "
                       "set context = 0")
    wtype, nh, kv = "workload.type", "workload.n_heads", "workload.n_kv_heads"
    hs, hd = "workload.hidden_size", "workload.head_dim"
    if ok(wtype, hs, nh, hd) and get(wtype) in ("layer_pipeline", "transformer") and not get(hd) \
            and get(hs) % get(nh) != 0:
        add(hs, [nh], f"must be a multiple of {nh} = {shown(nh)}, or {hd} set to the width of a head")
    if ok(wtype, nh, kv) and get(wtype) in ("layer_pipeline", "transformer") and get(kv) and get(nh) % get(kv):
        add(kv, [nh], f"must divide {nh} = {shown(nh)} (each key and value head serves the same number of "
                      "query heads), or be 0 for as many as n_heads")

    mtype, reps = "machine.type", "workload.replicas"
    machine = machines.get(get(mtype)) if ok(mtype) else None
    if machine is not None:  # what only this machine asks of a scenario
        if "path" in inspect.signature(machine.check_scenario).parameters:
            machine.check_scenario(ok, get, add, shown, path=path)
        else:  # a machine from an installed package written before the hook took the path
            machine.check_scenario(ok, get, add, shown)
    if ok(wtype, reps) and get(wtype) == "layer_pipeline" and get(reps) > 64:
        add(reps, [wtype], "must be an integer in [1, 64] (copies) for a layer_pipeline workload")
    # the layer pipeline's own rules, unless the machine is one that does not run it
    if ok(wtype) and get(wtype) == "layer_pipeline" and (machine is None or "layer_pipeline" in machine.workloads):
        _check_layer_pipeline(ok, get, add, shown)

    name = "run.name"
    if ok(name) and (any(c in get(name) for c in "/\\\0") or get(name) in (".", "..")):
        add(name, [], "must be a plain file name, without / or \\")
    elif ok(name) and len(get(name).encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        add(name, [], f"must be at most {MAX_NAME_BYTES} bytes long (its files, such as NAME.incomplete.h5.part, "
                      "must fit a file name's 255)")

    return problems


def _check_layer_pipeline(ok, get, add, shown) -> None:
    """Problems of a layer_pipeline workload that involve several keys (docs/mesh.md, "Dataflow"),
    each reported through `add`."""
    seq, tpc = "workload.seq_len", "workload.tokens_per_chunk"
    if ok(seq, tpc) and get(seq) % get(tpc) != 0:
        add(tpc, [seq], f"must divide {seq} = {shown(seq)}")
    ws, reps, tr = "workload.weight_streaming", "workload.replicas", "workload.training"
    if ok(ws, reps) and get(ws) and get(reps) != 1:
        add(reps, [ws], "must be 1 with weight streaming (the whole wafer holds one layer)")
    if ok(ws, tr) and get(ws) and get(tr):
        add(tr, [ws], "must be false with weight streaming: a training step is modelled only in "
                      "layer-pipelined mode")


def resolve_relative(file: str, scenario_path: str | None) -> str:
    """A path written in a scenario, relative to the scenario file's folder (or the cwd)."""
    if os.path.isabs(file):
        return file
    base = os.path.dirname(os.path.abspath(scenario_path)) if scenario_path else os.getcwd()
    return os.path.normpath(os.path.join(base, file))


# ---------------------------------------------------------------------------------------------
# Messages


# Names of precisions as other tools write them, and the markers of a mixed-precision setting
# (PyTorch's autocast, Lightning's "bf16-mixed", "bf16+fp32").
_PRECISION_NAMES = {"fp32": "fp32", "float32": "fp32", "32": "fp32", "tf32": "tf32", "bf16": "bf16",
                    "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16", "16": "fp16",
                    "fp8": "fp8", "float8": "fp8"}
_MIXED_MARKERS = ("mixed", "amp", "autocast")


def _precision_hint(value: str) -> str | None:
    """What to write instead of a mixed precision (two types, or "mixed", "amp"), or None.

    One precision per model sets the element size of every weight and activation it computes
    with; fp32 master weights beside it are workload.master_weights, so the compute type, the
    narrower of those named, is what workload.precision takes.
    """
    words = [w for w in re.split(r"[\s+/_,\-]+", value.lower()) if w]
    named = [_PRECISION_NAMES[w] for w in words if w in _PRECISION_NAMES]
    if not (any(w in _MIXED_MARKERS for w in words) or len(set(named)) >= 2):
        return None
    said = ("mixed precision is written as the compute precision here and workload.master_weights = \"fp32\" "
            "with an optimizer (workload.optimizer): give the compute precision alone, ")
    if not named:
        return said + 'e.g. "bf16" (the default) or "fp16"'
    return said + f'"{min(named, key=lambda n: PRECISION_BYTES[n])}"'


def _machine_type_hint(value: str) -> str | None:
    """What to write instead of a chip's name as machine.type ("wse2", "SN40L", "gc200"): the machine
    that models it, with the chip as its preset; None for a name that is no machine's preset."""
    from . import machine as machines

    name = re.sub(r"[\s_\-]+", "", value.lower())
    for m in machines.all_machines():
        if name in m.presets:
            return (f'"{value}" is a preset of the {m.name}: write machine.type = "{m.name}" and '
                    f'machine.preset = "{name}"')
    return None


_VALUE_HINTS = {"workload.precision": _precision_hint, "machine.type": _machine_type_hint}
"""Keys whose wrong values call for more than a near spelling: what to write instead, or None."""


def _unknown_top_level(where: str, name: str, content) -> str:
    if isinstance(content, dict):
        return f"{where}: [{name}]: {unknown_section(name, brackets=True)}"
    owners = [s for s in SECTIONS if name in _keys(s)]
    if owners:
        return (
            f"{where}: {name} = {toml_repr(content)}: keys belong in a section; "
            f"did you mean {owners[0]}.{name}?"
        )
    known = ", ".join(f"[{s}]" for s in SECTIONS)
    return (
        f"{where}: {name} = {toml_repr(content)}: unknown key outside any section; "
        f"keys belong in one of the sections {known}"
    )


def unknown_section(section: str, brackets: bool = False) -> str:
    wrap = (lambda s: f"[{s}]") if brackets else (lambda s: s)
    match = _closest(section, SECTIONS)
    if match:
        return f"unknown section; did you mean {wrap(match)}?"
    return "unknown section; the sections are " + ", ".join(wrap(s) for s in SECTIONS)


def unknown_key(section: str, key: str) -> str:
    # A right key in the wrong section is the likeliest slip, so it is tried before spelling.
    owners = [s for s in SECTIONS if key in _keys(s)]
    if owners:
        return f"unknown key; did you mean {owners[0]}.{key}?"
    match = _closest(key, _keys(section))
    if match:
        return f"unknown key; did you mean {section}.{match}?"
    elsewhere = {f"{s}.{k}": k for s in SECTIONS if s != section for k in _keys(s)}
    match = _closest(key, list(elsewhere.values()), cutoff=0.75)
    if match:
        paths = [p for p, k in elsewhere.items() if k == match]
        return f"unknown key; did you mean {paths[0]}?"
    return f"unknown key; the keys of [{section}] are " + ", ".join(_keys(section))


def toml_repr(value, limit: int = 80) -> str:
    """A value as it would be written in TOML, shortened for messages."""
    text = _toml_repr_full(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _toml_repr_full(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are valid TOML basic-string escapes.
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_repr_full(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_repr_full(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return repr(value)

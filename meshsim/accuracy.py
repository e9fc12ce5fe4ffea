"""`meshsim accuracy`: the model's figures against reference values, each with its error
(docs/design.md, "Accuracy").

A reference table is a CSV file with one case per row and the columns

- `scenario`: a scenario file (relative to the table's folder, else as given), or empty: the
  scenario is then made of the overrides alone (they name `machine.type` and the workload);
- `overrides`: `section.key=value` items separated by spaces, as on the command line (quoted where a
  value holds spaces);
- `figure`: a name of the run's summary (docs/design.md, "Result files"), e.g. `samples_per_second`;
- `reference`: the measured or analytic value;
- `source`: where the reference comes from;

and, optionally, `case` (a name; default the figure), `baseline` (overrides applied on top of the
case's for a second run: the figure is then the case's over the baseline's, a ratio such as a
speed-up) and `tolerance` (the relative error the model claims for the case; empty: none).

The shipped table, `meshsim/data/accuracy.csv`, holds the analytic network results (the mesh's
zero-load latency and accepted load below saturation) and the SN30 fusion measurements of the
DABench-LLM artifact (the rdu's o3 speed-up over o0, its section count and its highest PCU
allocation), and the Cerebras compiler's estimate for GPT-2 small training on the CS-2 from the same
artifact (the mesh's samples/s, active PEs and compute utilisation). Every case runs without writing
a result the user keeps; equal runs are run once.
"""

from __future__ import annotations

import csv
import math
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

SHIPPED = Path(__file__).parent / "data" / "accuracy.csv"
REQUIRED = ("scenario", "overrides", "figure", "reference", "source")
OPTIONAL = ("case", "baseline", "tolerance")


@dataclass(frozen=True)
class Case:
    """One row of a reference table."""

    case: str
    scenario: str  # a path, or "" for a scenario made of the overrides alone
    overrides: tuple
    figure: str
    reference: float
    source: str
    baseline: tuple | None = None
    tolerance: float | None = None
    origin: str = ""  # "table.csv:line", for messages


def read_table(path) -> list[Case]:
    """The cases of a reference table; InputError names the file, line, column and value of every
    problem."""
    path = Path(path)
    from .files import read_bounded

    data = read_bounded(path, str(path), "reference table")
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is not a column's name
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: the reference table is not UTF-8 text ({e.reason} at byte {e.start})") from None
    rows = list(csv.DictReader(text.splitlines()))
    header = rows[0].keys() if rows else next(csv.reader(text.splitlines()), [])
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(f"{path}: the reference table lacks the column(s) {', '.join(missing)}; it needs "
                         f"{', '.join(REQUIRED)} (and may have {', '.join(OPTIONAL)})")
    cases, problems = [], []
    for n, row in enumerate(rows, start=2):
        where = f"{path}:{n}"
        ref = _number(row.get("reference"), where, "reference", problems)
        tol = _number(row.get("tolerance"), where, "tolerance", problems) if (row.get("tolerance") or "").strip() \
            else None
        if tol is not None and not tol > 0:
            problems.append(f"{where}: tolerance = {row['tolerance']!r}: must be a number > 0 (a relative error)")
        figure = (row.get("figure") or "").strip()
        if not figure:
            problems.append(f"{where}: figure is empty: name a figure of the run's summary, e.g. samples_per_second")
        scenario = (row.get("scenario") or "").strip()
        if scenario and not Path(scenario).is_absolute() and (path.parent / scenario).exists():
            scenario = str(path.parent / scenario)
        base = row.get("baseline")
        overrides, baseline = _items(row.get("overrides"), where, "overrides", problems), None
        if base and base.strip():
            baseline = _items(base, where, "baseline", problems)
        cases.append(Case(case=(row.get("case") or "").strip() or figure, scenario=scenario, overrides=overrides,
                          figure=figure, reference=ref if ref is not None else math.nan,
                          source=(row.get("source") or "").strip(), baseline=baseline, tolerance=tol, origin=where))
    if problems:
        raise InputError(problems)
    return cases


def _items(text, where: str, column: str, problems: list) -> tuple:
    """`section.key=value` items of a cell, split as a shell would (a quoted value may hold spaces:
    'workload.layers_per_ipu=[3, 3, 3, 3]')."""
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as e:
        problems.append(f"{where}: {column} = {text!r}: {e} (items are section.key=value, quoted where a value "
                        "holds spaces)")
        return ()


def _number(text, where: str, column: str, problems: list) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        problems.append(f"{where}: {column} = {text!r}: must be a number")
        return None
    if not math.isfinite(value) or (column == "reference" and value == 0):
        problems.append(f"{where}: {column} = {text!r}: must be a finite number" + (", not 0 (the error is "
                        "relative to it)" if column == "reference" else ""))
        return None
    return value


def _scenario(case: Case, overrides: tuple):
    from .scenario import load_scenario, scenario_from_dict

    try:
        if case.scenario:
            return load_scenario(case.scenario, overrides)
        return scenario_from_dict({}, overrides=overrides)
    except InputError as e:
        raise InputError([f"{case.origin}: {p}" for p in e.problems]) from None


def evaluate(cases: list[Case], progress=None) -> list[dict]:
    """Run every case (each distinct scenario once) and return one row per case: its figure in the
    model, the reference, the relative error (model / reference - 1) and whether it is within the
    case's tolerance (None without one). `progress(done, total, label)` is called after each run."""
    from .report import read_summary
    from .run import run_scenario

    plan: dict = {}  # (scenario, overrides) -> the first case that asks for that run
    for c in cases:
        plan.setdefault((c.scenario, c.overrides), c)
        if c.baseline is not None:
            plan.setdefault((c.scenario, c.overrides + c.baseline), c)
    # every scenario is checked before the first runs: a bad row costs nothing
    scenarios, problems = {}, []
    for key, case in plan.items():
        try:
            scenarios[key] = _scenario(case, key[1])
        except InputError as e:
            problems.extend(e.problems)
    if problems:
        raise InputError(problems)
    by_key = {}
    with tempfile.TemporaryDirectory(prefix="meshsim-accuracy-") as tmp:
        for i, (key, case) in enumerate(plan.items()):
            res = run_scenario(scenarios[key], Path(tmp) / f"case{i}.h5", progress=False)
            by_key[key] = read_summary(res.path)[1]
            Path(res.path).unlink()
            if progress is not None:
                progress(i + 1, len(plan), case.case)
    rows = []
    for c in cases:
        s = by_key[(c.scenario, c.overrides)]
        value = _figure(s, c)
        if c.baseline is not None:
            b = _figure(by_key[(c.scenario, c.overrides + c.baseline)], c)
            value = value / b if b else math.nan
        err = value / c.reference - 1 if math.isfinite(value) else math.nan
        within = None if c.tolerance is None else bool(abs(err) <= c.tolerance)
        rows.append(dict(case=c.case, figure=c.figure + (" / baseline" if c.baseline else ""),
                         model=value, reference=c.reference, error=err, tolerance=c.tolerance, within=within,
                         source=c.source, origin=c.origin))
    return rows


def _figure(summary: dict, case: Case) -> float:
    if case.figure not in summary:
        import difflib

        near = difflib.get_close_matches(case.figure, list(summary), n=3)
        raise InputError(f"{case.origin}: figure = {case.figure!r} is not in the run's summary"
                         + (f"; did you mean {', '.join(near)}?" if near else ""))
    v = summary[case.figure]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{case.origin}: figure = {case.figure!r} is {v!r}, not a number")
    return float(v)


def envelope(rows: list[dict]) -> dict:
    """The largest |error| over the cases, and how many lie within their tolerance."""
    errs = [abs(r["error"]) for r in rows if math.isfinite(r["error"])]
    judged = [r for r in rows if r["within"] is not None]
    return dict(cases=len(rows), max_abs_error=max(errs) if errs else math.nan,
                within=sum(1 for r in judged if r["within"]), with_tolerance=len(judged))


def format_rows(rows: list[dict]) -> str:
    """The cases as a table, then the envelope."""
    lines = [f"{'case':<42}{'figure':<38}{'model':>11}{'reference':>11}{'error':>9}  {'tolerance':<12}source"]
    for r in rows:
        tol = "" if r["tolerance"] is None else f"{r['tolerance']:.0%} " + ("ok" if r["within"] else "OUTSIDE")
        lines.append(f"{r['case'][:41]:<42}{r['figure'][:37]:<38}{r['model']:>11.4g}{r['reference']:>11.4g}"
                     f"{r['error']:>+9.1%}  {tol:<12}{r['source']}")
    e = envelope(rows)
    lines.append(f"envelope: largest error {e['max_abs_error']:.1%} over {e['cases']} case(s); {e['within']} of "
                 f"{e['with_tolerance']} within their tolerance")
    return "\n".join(lines)

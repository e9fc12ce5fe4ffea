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
speed-up), `tolerance` (the relative error the model claims for the case; empty: none) and `role`
(`calibration`: the model was fitted or chosen against this row, a parameter fitted to it or a rule
picked among variants by it, so its error says how well the fit holds, not how well the model
predicts; `validation`: nothing was fitted to it; empty: not said), `group` (the rows of one model,
left out together by cross-validation) and `fit` (the keys fitted to the row: meshsim.calibrate). In
the shipped table the SN30 rows are calibration (docs/rdu.md, "Calibration": four machine keys
fitted to them by `meshsim calibrate`), the analytic and CS-2 rows validation.

Every row is reported: a case within its tolerance, outside it, without one, or one that could not
run (its scenario refused, its run stopped, its figure missing), with its CSV line and why, while
the others run.

The shipped table, `meshsim/data/accuracy.csv`, holds the analytic network results (the mesh's
zero-load latency and accepted load below saturation) and the SN30 measurements of the
DABench-LLM artifact (the rdu's chip time per step and end-to-end samples/s in o0 and o3, o3's
section count and its highest PCU allocation), the CARAML benchmark's GPT-2 small training rates on
four GC200 IPUs (the ipu's samples/s), and the Cerebras compiler's estimate for GPT-2 small
training on the CS-2 from the DABench-LLM artifact (the mesh's samples/s, active PEs and compute
utilisation). Every case runs without writing
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
OPTIONAL = ("case", "baseline", "tolerance", "role", "group", "fit")
ROLES = ("calibration", "validation", "")


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
    role: str = ""  # "calibration", "validation" or "" (not said)
    group: str = ""  # rows of one model, left out together by cross-validation ("": the row alone)
    fit: tuple = ()  # the keys fitted to this row (meshsim.calibrate)


def read_table(path, data: bytes | None = None) -> list[Case]:
    """The cases of a reference table; InputError names the file, line, column and value of every
    problem. data: the file's bytes, when the caller has read them (read_table_bytes)."""
    path = Path(path)
    if data is None:
        data = read_table_bytes(path)
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
        role = (row.get("role") or "").strip().lower()
        if role not in ROLES:
            problems.append(f"{where}: role = {row.get('role')!r}: must be calibration, validation or empty")
        base = row.get("baseline")
        overrides, baseline = _items(row.get("overrides"), where, "overrides", problems), None
        if base and base.strip():
            baseline = _items(base, where, "baseline", problems)
        cases.append(Case(case=(row.get("case") or "").strip() or figure, scenario=scenario, overrides=overrides,
                          figure=figure, reference=ref if ref is not None else math.nan,
                          source=(row.get("source") or "").strip(), baseline=baseline, tolerance=tol, origin=where,
                          role=role, group=(row.get("group") or "").strip(), fit=_keys(row.get("fit"), where,
                                                                                         problems)))
    if problems:
        raise InputError(problems)
    return cases


def read_table_bytes(path) -> bytes:
    """A reference table's bytes, as read_table reads them (a bounded regular file)."""
    from .files import read_bounded

    return read_bounded(Path(path), str(path), "reference table")


def _keys(text, where: str, problems: list) -> tuple:
    """The `fit` column: scenario keys, separated by spaces or commas."""
    from .params import PARAMS

    keys = tuple(k for k in (text or "").replace(",", " ").split() if k)
    known = {p.path for p in PARAMS}
    for k in keys:
        if k not in known:
            problems.append(f"{where}: fit = {text!r}: {k} is not a scenario key")
    return keys


def _items(text, where: str, column: str, problems: list) -> tuple:
    """`section.key=value` items of a cell, split as a shell would (a quoted value may hold spaces:
    'workload.layers_per_stage=[3, 3, 3, 3]')."""
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


def case_scenario(case: Case, overrides: tuple):
    from .scenario import load_scenario, scenario_from_dict

    try:
        if case.scenario:
            return load_scenario(case.scenario, overrides)
        return scenario_from_dict({}, overrides=overrides)
    except InputError as e:
        raise InputError([f"{case.origin}: {p}" for p in e.problems]) from None


def evaluate(cases: list[Case], progress=None, files_needed: bool = True) -> list[dict]:
    """Run every case (each distinct scenario once) and return one row per case: its figure in the
    model, the reference, the relative error (model / reference - 1), whether it is within the
    case's tolerance (None without one) and its status: "within", "outside", "no tolerance" or
    "could not run" (then `why` says why: a refused scenario, a run that failed, a figure the
    summary lacks). `progress(done, total, label)` is called after each run. files_needed=False: a
    machine whose summary needs no result file (meshsim.run.summary_only) writes none, its figures the
    same."""
    from . import files
    from .errors import RunFailed
    from .report import read_summary
    from .run import run_scenario, summary_only

    plan: dict = {}  # (scenario, overrides) -> the first case that asks for that run
    for c in cases:
        plan.setdefault((c.scenario, c.overrides), c)
        if c.baseline is not None:
            plan.setdefault((c.scenario, c.overrides + c.baseline), c)
    # every scenario is checked before the first runs: a bad row costs no run, and stops no other
    scenarios, failed = {}, {}
    for key, case in plan.items():
        try:
            scenarios[key] = case_scenario(case, key[1])
        except InputError as e:
            failed[key] = "; ".join(e.problems)
    by_key = {}
    with tempfile.TemporaryDirectory(prefix="meshsim-accuracy-") as tmp:
        for i, (key, case) in enumerate(plan.items()):
            if key in failed:
                continue
            try:
                summary = None if files_needed else summary_only(scenarios[key])
                if summary is None:
                    res = run_scenario(scenarios[key], Path(tmp) / f"case{i}.h5", progress=False)
                    summary = read_summary(res.path)[1]
                    files.remove(res.path)
                by_key[key] = summary
            except (InputError, RunFailed) as e:
                failed[key] = "; ".join(getattr(e, "problems", None) or getattr(e, "lines", None) or [str(e)])
            if progress is not None:
                progress(i + 1, len(plan), case.case)
    return [_row(c, by_key, failed) for c in cases]


def _row(c: Case, by_key: dict, failed: dict) -> dict:
    """A case's row of the table (evaluate)."""
    row = dict(case=c.case, figure=c.figure + (" / baseline" if c.baseline else ""), model=math.nan,
               reference=c.reference, error=math.nan, tolerance=c.tolerance, within=None, source=c.source,
               origin=c.origin, role=c.role, status="could not run", why="")
    keys = [(c.scenario, c.overrides)] + ([(c.scenario, c.overrides + c.baseline)] if c.baseline is not None else [])
    why = [failed[k] for k in keys if k in failed]
    if why:
        row["why"] = why[0]
        return row
    try:
        value = _figure(by_key[keys[0]], c)
        if c.baseline is not None:
            b = _figure(by_key[keys[1]], c)
            value = value / b if b else math.nan
    except InputError as e:
        row["why"] = "; ".join(e.problems)
        return row
    err = value / c.reference - 1 if math.isfinite(value) else math.nan
    within = None if c.tolerance is None else bool(abs(err) <= c.tolerance)
    row.update(model=value, error=err, within=within,
               status="no tolerance" if within is None else "within" if within else "outside")
    return row


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
    """Every row counted: how many lie within their tolerance, outside it, have none, or could not
    run; the largest |error| over those that ran, and over those with no tolerance apart."""
    def largest(rs):
        errs = [abs(r["error"]) for r in rs if math.isfinite(r["error"])]
        return max(errs) if errs else math.nan

    count = {s: sum(1 for r in rows if r.get("status") == s) for s in ("within", "outside", "no tolerance",
                                                                         "could not run")}
    return dict(cases=len(rows), max_abs_error=largest(rows), within=count["within"], outside=count["outside"],
                with_tolerance=count["within"] + count["outside"], without_tolerance=count["no tolerance"],
                max_abs_error_without_tolerance=largest([r for r in rows if r.get("status") == "no tolerance"]),
                could_not_run=count["could not run"])


def format_rows(rows: list[dict]) -> str:
    """The cases as a table (a case that could not run in its row, why below the table), then the
    envelope, which counts every row."""
    lines = [f"{'case':<42}{'figure':<38}{'model':>11}{'reference':>11}{'error':>9}  {'tolerance':<14}"
             f"{'role':<12}source"]
    for r in rows:
        if r.get("status") == "could not run":
            model, err, tol = f"{'-':>11}", f"{'-':>9}", "COULD NOT RUN"
        else:
            model, err = f"{r['model']:>11.4g}", f"{r['error']:>+9.1%}"
            tol = "none" if r["tolerance"] is None else f"{r['tolerance']:.0%} " + ("ok" if r["within"] else "OUTSIDE")
        lines.append(f"{r['case'][:41]:<42}{r['figure'][:37]:<38}{model}{r['reference']:>11.4g}{err}  {tol:<14}"
                     f"{r.get('role') or '-':<12}{r['source']}")
    for r in rows:
        if r.get("status") == "could not run":
            lines.append(f"  {r['origin']}: {r['case']}: could not run: {r['why']}")
    lines.append(format_envelope(envelope(rows)))
    return "\n".join(lines)


def format_envelope(e: dict) -> str:
    """The summary line: every row counted."""
    def pct(x):
        return "-" if not math.isfinite(x) else f"{x:.1%}"

    return (f"envelope: {e['cases']} case(s): {e['within']} within their tolerance, {e['outside']} outside it, "
            f"{e['without_tolerance']} with no tolerance (largest error among them "
            f"{pct(e['max_abs_error_without_tolerance'])}), {e['could_not_run']} could not run; largest error "
            f"{pct(e['max_abs_error'])} over the {e['cases'] - e['could_not_run']} that ran")

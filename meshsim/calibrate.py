"""`meshsim calibrate`: fit named machine keys to a reference table, and cross-validate the fit
(docs/design.md, "Calibration").

The table is a reference table of `meshsim accuracy` (meshsim.accuracy): the fit uses its calibration
rows (`role` = calibration; every row when the table names no role). The values fitted minimise the
sum over those rows of the squared log of model / reference (a row off by a factor 2 weighs the same
whichever way), with SciPy's bounded Powell search, which needs no derivatives: section counts and
cycle counts move in steps. Each key is searched in log space within its allowed range (a key whose
range starts at 0 as log(1 + value)), from the value the scenarios give it; integer keys are rounded.

Cross-validation refits leaving out one group of rows at a time (the `group` column: one model's
rows; a row without a group is a group of its own) and gives the error of the rows left out under
the values fitted without them, beside their error under the values fitted with every row.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from .errors import InputError

#: SciPy's Powell search: stop when a step moves the keys' log values by less than XTOL, or the sum of
#: squares by less than FTOL of itself; at most MAX_EVALUATIONS evaluations of the table per key.
XTOL, FTOL, MAX_EVALUATIONS = 1e-3, 1e-5, 150
#: The sum of squares a row that could not run adds at a trial point (the search steps away from it).
PENALTY = 1e6


@dataclass
class Fit:
    """The outcome of a fit: the keys, their values before and after, each row's error before and
    after (accuracy.evaluate rows), and how long it took."""

    keys: tuple
    start: dict
    values: dict
    before: list
    after: list
    evaluations: int
    seconds: float

    @property
    def cost_before(self) -> float:
        return cost(self.before)

    @property
    def cost_after(self) -> float:
        return cost(self.after)


def check_keys(text_or_keys) -> tuple:
    """The keys to fit, from "machine.a,machine.b" (or a sequence): each a numeric machine key. InputError
    names every key that is not one, and what is allowed."""
    from .params import PARAMS

    keys = [k.strip() for k in (text_or_keys.split(",") if isinstance(text_or_keys, str) else text_or_keys)]
    keys = [k for k in keys if k]
    if not keys:
        raise InputError("--fit: name at least one key to fit, e.g. --fit machine.section_switch_cycles")
    by_path = {p.path: p for p in PARAMS}
    numeric = sorted(p.path for p in PARAMS if p.section == "machine" and p.type in ("int", "float")
                     and p.range is not None)
    problems = []
    for k in keys:
        p = by_path.get(k)
        if p is None or p.section != "machine" or p.type not in ("int", "float") or p.range is None:
            why = "is not a scenario key" if p is None else "is not a numeric machine key"
            problems.append(f"--fit {k}: {why}; a fit sets numeric machine keys (those a preset file holds), "
                            f"e.g. {', '.join(numeric[:4])} (docs/parameters.md lists them all)")
    if len(set(keys)) != len(keys):
        problems.append(f"--fit {','.join(keys)}: names a key twice")
    if problems:
        raise InputError(problems)
    return tuple(keys)


def calibration_rows(cases: list, keys=None) -> list:
    """The rows a fit uses: those marked calibration, or every row of a table that marks none; with
    `keys`, those of them whose fit column names one of the keys or none (a table's rows of another
    machine's keys do not enter the fit)."""
    rows = [c for c in cases if c.role == "calibration"] if any(c.role for c in cases) else list(cases)
    if keys is not None:
        rows = [c for c in rows if not c.fit or set(c.fit) & set(keys)]
    return rows


def table_keys(cases: list) -> tuple:
    """The keys the table's calibration rows say are fitted to them (the `fit` column), in order."""
    return tuple(dict.fromkeys(k for c in calibration_rows(cases) for k in c.fit))


def cost(rows: list) -> float:
    """Sum over the rows of log(model / reference) squared; a row that did not give a positive figure
    adds PENALTY."""
    return sum(r * r if math.isfinite(r) else PENALTY for r in (_log_error(row) for row in rows))


def _log_error(row: dict) -> float:
    m, ref = row.get("model", math.nan), row["reference"]
    if not (isinstance(m, float) and math.isfinite(m)) or m <= 0 or ref <= 0:
        return math.nan
    return math.log(m / ref)


def start_values(cases: list, keys: tuple) -> dict:
    """Each key's value in the scenario of the first row (the preset's, or what the row sets)."""
    from .accuracy import case_scenario

    sc = case_scenario(cases[0], cases[0].overrides)
    return {k: sc.values["machine"][k.partition(".")[2]] for k in keys}


def with_values(cases: list, values: dict) -> list:
    """The rows with `values` set before their own overrides (a row that sets a key itself keeps it)."""
    from .params import format_number

    items = tuple(f"{k}={format_number(v)}" for k, v in values.items())
    return [replace(c, overrides=items + c.overrides) for c in cases]


def fit(cases: list, keys, progress=None, start: dict | None = None) -> Fit:
    """Fit `keys` to the calibration rows of `cases` (module doc). `progress(evaluations, cost, values)`
    is called after each evaluation of the table. InputError when a row cannot run at the start."""
    import numpy as np
    from scipy.optimize import minimize

    from .accuracy import evaluate
    from .params import param

    keys = check_keys(keys)
    rows = calibration_rows(cases, keys)
    if not rows:
        raise InputError("the table has no calibration rows to fit to (its role column marks none calibration)")
    t0 = time.perf_counter()
    start = dict(start) if start is not None else start_values(rows, keys)
    to_u, from_u, bounds = [], [], []
    for k in keys:
        p = param(*k.split("."))
        lo, hi = p.range
        shift = 1.0 if lo <= 0 else 0.0
        to_u.append(lambda v, s=shift: math.log(v + s))
        from_u.append(lambda u, s=shift, integer=p.type == "int", lo=lo, hi=hi:
                      _clip(round(math.exp(u) - s) if integer else math.exp(u) - s, lo, hi, integer))
        bounds.append((math.log(lo + shift), math.log(hi + shift)))
    seen: dict = {}

    def evaluate_at(values: dict) -> list:
        key = tuple(values.values())
        if key not in seen:
            seen[key] = evaluate(with_values(rows, values), files_needed=False)
            if progress is not None:
                progress(len(seen), cost(seen[key]), values)
        return seen[key]

    before = evaluate_at(start)
    failed = [r for r in before if r["status"] == "could not run"]
    if failed:
        raise InputError([f"{r['origin']}: {r['case']}: could not run at the start of the fit: {r['why']}"
                          for r in failed])

    def objective(u) -> float:
        return cost(evaluate_at({k: f(x) for k, f, x in zip(keys, from_u, u, strict=True)}))

    u0 = np.array([f(start[k]) for k, f in zip(keys, to_u, strict=True)])
    minimize(objective, u0, method="Powell", bounds=bounds,
             options=dict(xtol=XTOL, ftol=FTOL, maxfev=MAX_EVALUATIONS * len(keys)))
    best = min(seen, key=lambda v: cost(seen[v]))  # the search's best point, whatever it stopped on
    values = dict(zip(keys, best, strict=True))
    return Fit(keys=keys, start=start, values=values, before=before, after=seen[best], evaluations=len(seen),
               seconds=time.perf_counter() - t0)


def _clip(v, lo, hi, integer: bool):
    v = min(max(v, lo), hi)
    return int(v) if integer else float(v)


def cross_validate(cases: list, keys, fitted: dict, progress=None) -> list[dict]:
    """One row per row of every group of calibration rows: its error under `fitted` (the values fitted
    to every row) and under the values fitted with its group left out (`left_out_values`)."""
    from .accuracy import evaluate

    rows = calibration_rows(cases, keys)
    groups = list(dict.fromkeys(c.group or c.case for c in rows))
    if len(groups) < 2:
        raise InputError("--cross-validate: the calibration rows form fewer than two groups (the group column), "
                         "so none can be left out")
    full = {r["origin"]: r for r in evaluate(with_values(rows, fitted), files_needed=False)}
    out = []
    for g in groups:
        kept = [c for c in rows if (c.group or c.case) != g]
        left = [c for c in rows if (c.group or c.case) == g]
        f = fit(kept, keys, start=fitted)
        for r in evaluate(with_values(left, f.values), files_needed=False):
            out.append(dict(group=g, case=r["case"], figure=r["figure"], reference=r["reference"],
                            model_fitted=full[r["origin"]]["model"], error_fitted=full[r["origin"]]["error"],
                            model_left_out=r["model"], error_left_out=r["error"], status=r["status"],
                            left_out_values=f.values, origin=r["origin"]))
        if progress is not None:
            progress(len(out), g, f)
    return out


def format_fit(f: Fit, table: str) -> str:
    """The fit as a person reads it: the values, then each row's error before and after."""
    lines = [f"fitted {', '.join(f.keys)} to {len(f.after)} calibration row(s) of {table} "
             f"({f.evaluations} evaluation(s) of the table, {f.seconds:.0f} s)"]
    for k in f.keys:
        lines.append(f"  {k}: {_show(f.start[k])} -> {_show(f.values[k])}")
    lines.append(f"{'case':<44}{'figure':<30}{'reference':>11}{'before':>11}{'error':>9}{'after':>11}{'error':>9}")
    for b, a in zip(f.before, f.after, strict=True):
        lines.append(f"{a['case'][:43]:<44}{a['figure'][:29]:<30}{a['reference']:>11.4g}{b['model']:>11.4g}"
                     f"{b['error']:>+9.1%}{a['model']:>11.4g}{a['error']:>+9.1%}")
    lines.append(f"sum of squared log errors: {f.cost_before:.4g} before, {f.cost_after:.4g} after; largest error "
                 f"{_largest(f.before):.1%} before, {_largest(f.after):.1%} after")
    return "\n".join(lines)


def format_cross_validation(rows: list[dict]) -> str:
    lines = [f"{'left out':<16}{'case':<44}{'reference':>11}{'fitted':>11}{'error':>9}{'left out':>11}{'error':>9}"]
    for r in rows:
        lines.append(f"{r['group'][:15]:<16}{r['case'][:43]:<44}{r['reference']:>11.4g}{r['model_fitted']:>11.4g}"
                     f"{r['error_fitted']:>+9.1%}{r['model_left_out']:>11.4g}{r['error_left_out']:>+9.1%}")
    fitted = _largest([dict(error=r["error_fitted"]) for r in rows])
    left = _largest([dict(error=r["error_left_out"]) for r in rows])
    lines.append(f"cross-validated: largest error {left:.1%} with each group left out of the fit, {fitted:.1%} "
                 f"with every row in it ({len(rows)} row(s), {len({r['group'] for r in rows})} group(s))")
    return "\n".join(lines)


def _largest(rows) -> float:
    errs = [abs(r["error"]) for r in rows if isinstance(r["error"], float) and math.isfinite(r["error"])]
    return max(errs) if errs else math.nan


def _show(v) -> str:
    from .params import format_number

    return format_number(v) if isinstance(v, int) else f"{v:.6g}"


def preset_text(f: Fit, table: str, table_sha256: str) -> str:
    """The preset file of a fit: its values under [machine], how they were fitted under [calibration]
    (a scenario names it as machine.preset_file)."""
    import tomli_w

    doc = {"machine": {k.partition(".")[2]: v for k, v in f.values.items()},
           "calibration": {"table": table, "table_sha256": table_sha256, "keys": list(f.keys),
                           "rows": len(f.after), "start": {k.partition(".")[2]: v for k, v in f.start.items()},
                           "sum_squared_log_error_before": f.cost_before, "sum_squared_log_error": f.cost_after,
                           "largest_error": _largest(f.after), "evaluations": f.evaluations}}
    return ("# Machine keys fitted by `meshsim calibrate`; a scenario uses them with\n"
            "# machine.preset_file = \"<this file>\" (docs/design.md, \"Calibration\").\n" + tomli_w.dumps(doc))

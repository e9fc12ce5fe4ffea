"""Splice named steps into the one function Numba compiles (docs/design.md, "Spliced kernels").

The mesh's row stepper is read and edited as named steps (kernels/mesh_steps.py) and its migration
policies as units (kernels/mesh_policies.py), each a plain Python function under 150 lines. Numba
compiles the single function their bodies make when each step's call is replaced by its body: that
function is written into its module between two marker lines, and is never edited by hand.
(Numba's own `inline="always"` copies a callee's IR at each call site and again at each level of
nesting, which put the cold compile 40-55 s above the single function's.)

A step is a top-level function of a source module, called as a statement of its own:

    step(a, b, c)               # a step that returns nothing
    x, y = step(a, b, x, y)     # one that ends in `return x, y`

Its arguments are plain names equal to its parameters, so that its body reads the caller's
variables by the same names; the names it returns are the names assigned; a parameter it rebinds
(`x += 1`) it returns; it has no other `return`. A spliced body then does what the call did. Every
global name a step reads is defined in the target module.

    python -m kernels.splice           # rewrite the spliced functions
    python -m kernels.splice --check   # exit 1 if any differs from its steps (a test runs this)
"""

from __future__ import annotations

import argparse
import ast
import builtins
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Spliced:
    """One spliced function: `entry`, found in `sources`, written into `target` after `decorator`
    (file names relative to `root`, the kernels' folder unless a test says otherwise)."""

    target: str
    entry: str
    decorator: str
    sources: tuple
    root: Path = HERE


SPLICED = (
    Spliced("mesh.py", "run_cycles", "@njit(**JIT_PARALLEL)", ("mesh_steps.py", "mesh_policies.py")),
    Spliced("mesh.py", "_step_rows", "@njit(**JIT_NO_REFCOUNT)", ("mesh_steps.py", "mesh_policies.py")),
    Spliced("rdu.py", "run_intervals", "@njit(**JIT)", ("rdu_steps.py",)),
)

BEGIN = "# BEGIN SPLICED {entry}: python -m kernels.splice writes it from its steps; edit those, not this."
END = "# END SPLICED {entry}"


class SpliceError(ValueError):
    """A step that cannot be spliced faithfully; the message names the file, line and step."""


@dataclass
class _Function:
    node: ast.FunctionDef
    lines: list
    path: str


def _functions(root: Path, paths) -> dict:
    out = {}
    for rel in paths:
        text = (root / rel).read_text()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef):
                if node.name in out:
                    raise SpliceError(f"{rel}:{node.lineno}: step {node.name} is defined twice")
                out[node.name] = _Function(node, text.splitlines(), rel)
    return out


def _names(node) -> list:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
        return [e.id for e in node.elts]
    return []


def _step_call(stmt, steps):
    """(callee, assigned names) when `stmt` is a call of a step, else None."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call, targets = stmt.value, []
    elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and len(stmt.targets) == 1:
        call, targets = stmt.value, _names(stmt.targets[0])
    else:
        return None
    if isinstance(call.func, ast.Name) and call.func.id in steps:
        return call, targets
    return None


def _bound(body) -> set:
    """The names that statements in `body` bind (nested functions aside)."""
    out = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
    return out


def _docstring_end(node: ast.FunctionDef) -> int:
    """The last line of the function's docstring, or of its `def` line when it has none."""
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return first.lineno - 1


def _check_step(f: _Function, call: ast.Call, targets: list, where: str) -> list:
    """The step's body statements, after checking that splicing it does what the call does."""
    node = f.node
    name = node.name
    params = [a.arg for a in node.args.args]
    if node.args.vararg or node.args.kwarg or node.args.kwonlyargs or node.args.posonlyargs or node.args.defaults or \
            node.decorator_list:
        raise SpliceError(f"{f.path}:{node.lineno}: step {name} takes plain positional parameters, no decorator")
    args = [a.id if isinstance(a, ast.Name) else None for a in call.args]
    if call.keywords or args != params:
        raise SpliceError(f"{where}: step {name} is called with ({', '.join(str(a) for a in args)}); "
                          f"its arguments must be its parameters' names ({', '.join(params)})")
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str):
        body = body[1:]
    returned = []
    if body and isinstance(body[-1], ast.Return):
        returned = _names(body[-1].value) if body[-1].value is not None else []
        if body[-1].value is not None and not returned:
            raise SpliceError(f"{f.path}:{body[-1].lineno}: step {name} must return names (a, b, ...)")
        body = body[:-1]
    if returned != targets:
        raise SpliceError(f"{where}: step {name} returns ({', '.join(returned)}); the call assigns "
                          f"({', '.join(targets)}): they must be the same names")
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Return):
                raise SpliceError(f"{f.path}:{n.lineno}: step {name} returns before its end")
            if isinstance(n, (ast.FunctionDef, ast.Lambda, ast.Global, ast.Nonlocal)):
                raise SpliceError(f"{f.path}:{n.lineno}: step {name} defines a function or declares a scope")
    rebound = sorted((_bound(body) & set(params)) - set(returned))
    if rebound:
        raise SpliceError(f"{f.path}:{node.lineno}: step {name} rebinds its parameter(s) {', '.join(rebound)} "
                          f"without returning them")
    if not body:
        raise SpliceError(f"{f.path}:{node.lineno}: step {name} has no statements")
    return body


def _body_lines(f: _Function, body: list, steps: dict, depth: int) -> list:
    """The step's body as lines indented from column 0 (the comments after its docstring first), with the
    steps it calls spliced in."""
    if depth > 20:
        raise SpliceError(f"{f.path}:{f.node.lineno}: steps call each other more than 20 deep")
    first, last = _docstring_end(f.node) + 1, body[-1].end_lineno
    lines = list(f.lines[first - 1:last])
    calls = []
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.stmt):
                found = _step_call(n, steps)
                if found:
                    calls.append((n, found))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in steps:
                if not any(c.value is n for c, _ in calls):
                    raise SpliceError(f"{f.path}:{n.lineno}: step {n.func.id} must be called as a statement of "
                                      f"its own")
    for stmt, (call, targets) in sorted(calls, key=lambda c: -c[0].lineno):
        where = f"{f.path}:{stmt.lineno}"
        line = f.lines[stmt.lineno - 1]
        tail = f.lines[stmt.end_lineno - 1][stmt.end_col_offset:].strip()
        if line[:stmt.col_offset].strip() or (tail and not tail.startswith("#")):
            raise SpliceError(f"{where}: a step's call must have its lines to itself")
        callee = steps[call.func.id]
        inner = _body_lines(callee, _check_step(callee, call, targets, where), steps, depth + 1)
        pad = " " * stmt.col_offset
        lines[stmt.lineno - first:stmt.end_lineno - first + 1] = [pad + s if s.strip() else "" for s in inner]
    text = textwrap.dedent("\n".join(lines))
    return text.rstrip("\n").split("\n")


def _globals_read(fn: ast.FunctionDef) -> set:
    local = {a.arg for a in fn.args.args} | _bound(fn.body)
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local


def splice(spec: Spliced) -> str:
    """The text of `spec.entry` with every step spliced in, decorator first."""
    steps = _functions(spec.root, spec.sources)
    if spec.entry not in steps:
        raise SpliceError(f"{spec.entry} is in none of {', '.join(spec.sources)}")
    entry = steps.pop(spec.entry)
    for other in SPLICED:  # (another entry in the same sources is called, not spliced)
        if other.sources == spec.sources:
            steps.pop(other.entry, None)
    node = entry.node
    body = node.body
    doc = body[0] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else None
    head = entry.lines[node.lineno - 1:(doc.end_lineno if doc else body[0].lineno - 1)]
    inner = _body_lines(entry, body[1:] if doc else body, steps, 0)
    lines = [spec.decorator] * bool(spec.decorator) + head + ["    " + s if s.strip() else "" for s in inner]
    text = "\n".join(lines) + "\n"
    target_names = _module_names((spec.root / spec.target).read_text())
    tree = ast.parse(text).body[0]
    missing = sorted(_globals_read(tree) - target_names - set(dir(builtins)))
    if missing:
        raise SpliceError(f"{spec.entry}: the steps read names that {spec.target} does not define: "
                          f"{', '.join(missing)}")
    return text


def _module_names(text: str) -> set:
    out = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            out |= _bound([node])
    return out


def _markers(spec: Spliced) -> tuple:
    return BEGIN.format(entry=spec.entry), END.format(entry=spec.entry)


def written(spec: Spliced) -> tuple:
    """The target's text, the start and the end of its spliced region (the lines between the markers)."""
    text = (spec.root / spec.target).read_text()
    begin, end = _markers(spec)
    lines = text.split("\n")
    try:
        i, j = lines.index(begin), lines.index(end)
    except ValueError:
        raise SpliceError(f"{spec.target} lacks the marker lines of {spec.entry}") from None
    return lines, i + 1, j


def stale(specs=SPLICED) -> list:
    """The spliced functions whose written text differs from their steps'."""
    out = []
    for spec in specs:
        lines, i, j = written(spec)
        if "\n".join(lines[i:j]) + "\n" != splice(spec):
            out.append(f"{spec.target}:{spec.entry}")
    return out


def write(specs=SPLICED) -> list:
    """Rewrite every spliced function that differs; the ones rewritten."""
    out = []
    for spec in specs:
        text = splice(spec)
        lines, i, j = written(spec)
        if "\n".join(lines[i:j]) + "\n" != text:
            lines[i:j] = text.rstrip("\n").split("\n")
            (spec.root / spec.target).write_text("\n".join(lines))
            out.append(f"{spec.target}:{spec.entry}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.splice", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a spliced function differs from its steps")
    args = parser.parse_args(argv)
    try:
        if args.check:
            bad = stale()
            for b in bad:
                print(f"kernels/{b} differs from its steps: run python -m kernels.splice", file=sys.stderr)
            return 1 if bad else 0
        for w in write():
            print(f"rewrote kernels/{w}")
        return 0
    except SpliceError as e:
        print(f"splice: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

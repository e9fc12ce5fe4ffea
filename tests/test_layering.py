"""The layering of docs/design.md, "Layout", read from the source: no import cycle among meshsim's
modules (function-level imports included); the kernels import nothing of meshsim and the oracles
nothing of meshsim or of the kernels; the run loop, the command line and report name no machine;
and no function of meshsim, of the kernels (their steps, for a spliced kernel) or of the oracles is
longer than 150 lines."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ("mesh", "rdu", "ipu")
#: Modules written once for every machine: they ask the registry (meshsim.machine), never a name.
MACHINE_FREE = ("meshsim/run.py", "meshsim/cli.py", "meshsim/report.py", "meshsim/output.py", "meshsim/analysis.py",
                "meshsim/threads.py")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(top: str) -> dict:
    return {module_name(p): p for p in sorted((ROOT / top).rglob("*.py"))}


def imports(path: Path, name: str, known) -> set:
    """The modules of `known` that `path` (module `name`) imports anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            # a module imports its packages' __init__ too
            while t:
                if t in known and t != name:
                    out.add(t)
                t = t.rpartition(".")[0]
    return out


def test_no_import_cycle_among_meshsim_modules():
    mods = modules("meshsim")
    graph = {m: imports(p, m, mods) for m, p in mods.items()}
    # a package's __init__ importing its own submodules is not a cycle of the design
    for m in graph:
        graph[m] = {t for t in graph[m] if not (t.startswith(m + ".") and mods[m].name == "__init__.py")}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_layering_test_sees_a_cycle(tmp_path):
    """The cycle finder is not vacuous: two modules importing each other inside functions are found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    from .b import g\n")
    b.write_text("def g():\n    from . import a\n")
    known = {"pkg.a", "pkg.b"}
    assert imports(a, "pkg.a", known) == {"pkg.b"} and imports(b, "pkg.b", known) == {"pkg.a"}


@pytest.mark.parametrize("top, banned", [("kernels", ("meshsim",)), ("kernels/reference", ("meshsim", "kernels"))])
def test_kernels_import_nothing_of_meshsim_and_oracles_nothing_of_the_kernels(top, banned):
    # an oracle may use another oracle (each written from the docs, neither the code checked), by its
    # whole name: kernels.reference.<oracle>
    bad = []
    for p in sorted((ROOT / top).rglob("*.py")):
        if top == "kernels" and "reference" in p.parts:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if top == "kernels/reference" and isinstance(node, ast.ImportFrom) and node.level:
                names = ["kernels"]  # a relative import from an oracle reaches into kernels
            if top == "kernels/reference":
                names = [n for n in names if not n.startswith("kernels.reference.")]
            bad += [f"{p.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in banned]
    assert not bad, bad


@pytest.mark.parametrize("rel", MACHINE_FREE)
def test_the_run_loop_cli_and_report_name_no_machine(rel):
    path = ROOT / rel
    tree = ast.parse(path.read_text())
    named = [f"{rel}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in MACHINES]
    mods = modules("meshsim")
    reached = sorted(m for m in imports(path, module_name(path), mods) if m.split(".")[1:2] and
                     m.split(".")[1] in MACHINES)
    assert not named and not reached, named + reached


def spliced_lines(text: str) -> set:
    """The lines of `text` between a BEGIN SPLICED marker and its END (kernels/splice.py writes them
    from steps, which are held to the length themselves)."""
    out, inside = set(), False
    for i, line in enumerate(text.split("\n"), 1):
        if line.startswith("# BEGIN SPLICED "):
            inside = True
        elif line.startswith("# END SPLICED "):
            inside = False
        elif inside:
            out.add(i)
    return out


@pytest.mark.parametrize("top", ["meshsim", "kernels", "kernels/reference"])
def test_no_function_of_meshsim_the_kernels_or_the_oracles_is_longer_than_150_lines(top):
    long = []
    for p in sorted((ROOT / top).rglob("*.py")):
        text = p.read_text()
        spliced = spliced_lines(text)
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 150 and \
                    n.lineno not in spliced:
                long.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert not long, long


def test_the_spliced_functions_are_the_only_ones_exempt():
    from kernels.splice import SPLICED

    exempt = set()
    for p in sorted((ROOT / "kernels").glob("*.py")):
        text = p.read_text()
        spliced = spliced_lines(text)
        exempt |= {(p.name, n.name) for n in ast.parse(text).body
                   if isinstance(n, ast.FunctionDef) and n.lineno in spliced}
    assert exempt == {(s.target, s.entry) for s in SPLICED}


#: Names with a leading underscore that are a public API of what they belong to (named tuples).
PUBLIC_UNDERSCORED = {"_fields", "_replace", "_asdict", "_make", "_field_defaults"}


def private_uses(source: str, where: str) -> list:
    """Where `source` imports another module's private name (`from m import _x`) or reads one
    through a module it imported (`import m` ... `m._x`)."""
    tree = ast.parse(source)
    modules_bound = set()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules_bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{where}:{node.lineno} from {'.' * node.level}{node.module or ''} import {a.name}")
                elif a.name[:1].islower():
                    modules_bound.add(a.asname or a.name)  # perhaps a module: checked below if it is one
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules_bound
                and node.attr.startswith("_") and not node.attr.startswith("__")
                and node.attr not in PUBLIC_UNDERSCORED):
            out.append(f"{where}:{node.lineno} {node.value.id}.{node.attr}")
    return out


def test_no_private_name_is_imported_across_modules():
    # meshsim and the kernels: a name with a leading underscore is its module's own (the tests may
    # reach into a module they test).
    found = []
    for top in ("meshsim", "kernels"):
        for p in sorted((ROOT / top).rglob("*.py")):
            found += private_uses(p.read_text(), str(p.relative_to(ROOT)))
    assert not found, found


def test_the_private_name_check_sees_an_import_and_an_attribute():
    src = ("import numpy as np\nfrom . import state\nfrom .run import _save, load\nx = state._layout + np._x\n"
           "y = st._fields\n")
    assert private_uses(src, "m.py") == ["m.py:3 from .run import _save", "m.py:4 state._layout", "m.py:4 np._x"]


def _attributes_read(path: Path) -> set:
    return {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize("rel, side", [(r, "reader") for r in ("meshsim/report.py", "meshsim/analysis.py",
                                                               "meshsim/export.py", "meshsim/plots.py",
                                                               "meshsim/result.py")]
                         + [("meshsim/run.py", "runner")])
def test_reading_a_result_needs_only_the_reader_side_of_a_machine_and_a_run_only_the_runner_side(rel, side):
    from meshsim.machine import MachineRunner, ResultReader

    def own(cls, other):
        return {k for k in vars(cls) if not k.startswith("_")} - {k for k in vars(other) if not k.startswith("_")}

    other_side = own(MachineRunner, ResultReader) if side == "reader" else own(ResultReader, MachineRunner)
    assert other_side, "the two sides of the interface share every name"
    assert not (_attributes_read(ROOT / rel) & other_side), sorted(_attributes_read(ROOT / rel) & other_side)

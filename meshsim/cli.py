"""Command line: `python -m meshsim` and the `meshsim` script (DESIGN.md section 6).

A thin layer over the library. Problems with what the user gave (scenario, overrides, trace,
result file) print one line each and exit with status 2, no traceback; a bug keeps its traceback
(exit 1); an interrupted run exits with 130 and names its incomplete file.
"""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import InputError


def _cmd_run(args) -> int:
    from .engine import run_scenario
    from .report import format_summary, read_regions, read_summary
    from .scenario import load_scenario

    sc = load_scenario(args.scenario, args.overrides)
    res = run_scenario(sc, args.output, threads=args.threads, progress=None if not args.quiet else False)
    if not args.quiet:
        root, summary = read_summary(res.path)
        print(format_summary(summary, root, res.path, read_regions(res.path)))
    return 0


def _cmd_validate(args) -> int:
    from .scenario import load_scenario

    sc = load_scenario(args.scenario, args.overrides)
    if sc.get("workload", "type") == "trace":
        from .trace import load_trace

        load_trace(sc.trace_path, sc.get("machine", "rows"), sc.get("machine", "cols"))  # its problems too
    if sc.get("workload", "type") == "layer_pipeline":
        from .pipeline import build

        build(sc)  # placement, task lengths and weights: what a run would refuse
    m = sc.values["machine"]
    if m["type"] == "rdu":
        from .rdu import compile_scenario

        prog = compile_scenario(sc)  # what a run would refuse
        w = sc.values["workload"]
        print(f"{args.scenario}: valid (rdu {m['preset']}, {prog.chips_total} chip(s) {w['parallelism']}, fusion "
              f"{w['fusion']}: {len(prog.sections)} sections, {int(prog.n_instances.sum())} to run)")
    else:
        print(f"{args.scenario}: valid ({sc.get('machine', 'type')} {m['rows']} x {m['cols']}, "
              f"{sc.get('workload', 'type')} workload, migration {sc.get('migration', 'policy')}, "
              f"{sc.get('run', 'cycles'):,} cycles)")
    if args.resolved:
        print(sc.resolved_toml(), end="")
    return 0


def _cmd_report(args) -> int:
    from .report import format_summary, read_regions, read_summary, summary_json

    root, summary = read_summary(args.result)
    regions = read_regions(args.result)
    print(summary_json(summary, root, regions) if args.json else format_summary(summary, root, args.result, regions))
    return 0


def _cmd_bench(args) -> int:
    from .bench import run_bench

    run_bench(json_out=args.json, quick=args.quick, cycles=args.cycles)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="meshsim", description="Cycle-approximate simulator of spatial AI accelerators "
                                "for load-balance studies.")
    p.add_argument("--version", action="version", version=f"meshsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a scenario and write its HDF5 result")
    r.add_argument("scenario", help="scenario TOML file")
    r.add_argument("overrides", nargs="*", metavar="section.key=value", help="override scenario values")
    r.add_argument("-o", "--output", help="result file (default results/NAME.h5)")
    r.add_argument("--threads", type=int, default=None, help="Numba threads (default run.threads; 0 = all cores)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    r.set_defaults(func=_cmd_run)

    v = sub.add_parser("validate", help="check a scenario without running it")
    v.add_argument("scenario")
    v.add_argument("overrides", nargs="*", metavar="section.key=value")
    v.add_argument("--resolved", action="store_true", help="print the scenario with every default filled in")
    v.set_defaults(func=_cmd_validate)

    rep = sub.add_parser("report", help="print the summary of a result file")
    rep.add_argument("result")
    rep.add_argument("--json", action="store_true", help="machine-readable JSON")
    rep.set_defaults(func=_cmd_report)

    b = sub.add_parser("bench", help="measure simulation speed, compile time, memory and output overhead")
    b.add_argument("--json", action="store_true", help="print the figures as JSON")
    b.add_argument("--quick", action="store_true", help="a small grid instead of the full fabric (for checking)")
    b.add_argument("--cycles", type=_positive_int, default=300, help="cycles per speed measurement (default 300)")
    b.set_defaults(func=_cmd_bench)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "threads", None) is not None and args.threads < 0:
            raise InputError(f"--threads = {args.threads}: must be an integer >= 0 (0 = all cores)")
        return args.func(args)
    except InputError as e:
        for line in e.problems:
            print(f"meshsim: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("meshsim: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the run's own interruption carries the path of what it kept
        from .engine import RunInterrupted

        if isinstance(e, RunInterrupted):
            print(f"meshsim: {e}", file=sys.stderr)
            return 130
        raise


if __name__ == "__main__":
    sys.exit(main())

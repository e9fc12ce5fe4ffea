"""Command line: `python -m meshsim` and the `meshsim` script (docs/design.md, "Command line").

A thin layer over the library. Problems with what the user gave (scenario, overrides, trace,
result file) print one line each and exit with status 2, no traceback; a run its surroundings
stopped (a write that failed: a full disk, an I/O error) says what failed, what was kept and how to
go on, and exits with status 1, no traceback; a bug keeps its traceback (exit 1); an interrupted
run exits with 130 and names its incomplete file.

The commands that take a scenario (run, validate, roofline) read their options and their
`section.key=value` overrides in any order: `run S.toml -o R.h5 a.b=1` is `run S.toml a.b=1 -o R.h5`.

Output closed early (`meshsim report R.h5 --json | head -c 100`) ends the command quietly, as
Unix tools end: no traceback, nothing on stderr, exit status 141 (128 + SIGPIPE, what a shell
shows for a tool the signal ended). SIGPIPE itself keeps Python's setting (ignored), so a closed
socket stays an exception where it is met (the Dask cluster of `meshsim sweep`); a BrokenPipeError
that reaches here while stdout and stderr are still read is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import warnings
from pathlib import Path

from . import __version__
from .errors import InputError, RunFailed


def _cmd_run(args) -> int:
    from .report import format_summary, read_regions, read_summary
    from .run import run_scenario
    from .scenario import load_scenario

    progress = None if not args.quiet else False
    if args.resume is not None:
        from .run import resume_run

        given = [what for what, v in (("scenario file", args.scenario), ("overrides", args.overrides),
                                      ("-o", args.output)) if v]
        if given:
            raise InputError(f"--resume {args.resume}: give no {' and no '.join(given)} with it: a resumed run goes "
                             "on with the scenario and the result path in its file")
        res = resume_run(args.resume, threads=args.threads, progress=progress)
    elif args.scenario is None:
        raise InputError("run: give a scenario file, or --resume RESULT.incomplete.h5")
    else:
        sc = load_scenario(args.scenario, args.overrides)
        res = run_scenario(sc, args.output, threads=args.threads, progress=progress)
    if not args.quiet:
        root, summary = read_summary(res.path)
        print(format_summary(summary, root, res.path, read_regions(res.path)))
    return 0


def _cmd_validate(args) -> int:
    from .machine import get
    from .report import model_lines
    from .scenario import load_scenario
    from .transformer import describe_model, refuse_a_decode_run, scenario_model

    sc = load_scenario(args.scenario, args.overrides)
    machine = get(sc.get("machine", "type"))
    refuse_a_decode_run(sc)
    inputs = machine.validate(sc)  # what a run would refuse (a trace, a placement, memory)
    print(machine.describe(str(args.scenario), sc, inputs))
    found = scenario_model(sc.values)
    if found is not None:
        print("\n".join(model_lines(describe_model(*found), "\n".join(sc.model_notes))))
    if args.resolved:
        print(sc.resolved_toml(), end="")
    return 0


def _cmd_report(args) -> int:
    import json

    from .analysis import MissingData, analyse, format_comparison, format_report
    from .report import format_summary, read_regions, read_summary, summary_json, to_json

    if args.window is not None and args.window < 1:
        raise InputError(f"--window {args.window}: must be an integer >= 1 (cycles)")
    if args.target is not None and not (0 < args.target <= 1):
        raise InputError(f"--target {args.target}: must be a number in (0, 1] (an LI)")
    if len(args.result) > 1:
        items = []
        for p in args.result:
            try:
                items.append(analyse(p, args.window, args.target))
            except InputError as e:
                raise InputError([m if m.startswith(str(p)) else f"{p}: {m}" for m in e.problems]) from None
        print(to_json({"files": items}) if args.json else format_comparison(items))
        return 0
    path = args.result[0]
    root, summary = read_summary(path)
    regions = read_regions(path)
    try:
        analysis, why = analyse(path, args.window, args.target), None
    except MissingData as e:
        analysis, why = None, "; ".join(e.problems)  # a run killed before it wrote its totals
    if args.json:
        data = json.loads(summary_json(summary, root, regions))
        data["analysis"] = analysis
        print(to_json(data))
        return 0
    print(format_summary(summary, root, path, regions))
    print()
    print(format_report(analysis) if analysis is not None else f"no recomputation: {why}")
    return 0


def _cmd_plot(args) -> int:
    from .plots import plot

    kinds = [k.strip() for part in (args.kind or []) for k in part.split(",") if k.strip()]
    if str(args.result).endswith(".csv"):  # a sweep's summary table
        from .plots import sweep

        if not args.metric or not args.x:
            raise InputError(f"{args.result}: a sweep table needs --metric and --x (and --y for a heat map)")
        out = args.output or str(args.result)[: -len(".csv")]
        for path in sweep(args.result, out, args.metric, args.x, args.y, args.format):
            print(path)
        return 0
    if args.metric or args.x or args.y:
        raise InputError("--metric, --x and --y: apply only to a sweep's summary table (.csv)")
    for path in plot(args.result, args.output, kinds or None, args.format, args.cycle):
        print(path)
    return 0


def _cmd_export(args) -> int:
    from .export import export

    print(export(args.result, args.format, args.output, points=args.points, slices=args.slices))
    return 0


def _cmd_roofline(args) -> int:
    from .roofline import format_table, values_of_file

    values = None
    if args.file and "=" in args.file and not os.path.exists(args.file):
        raise InputError(f"{args.file}: overrides apply to a scenario; write roofline SCENARIO.toml "
                         "section.key=value ...")
    if args.file:
        if str(args.file).endswith(".toml"):
            from .scenario import load_scenario

            values = load_scenario(args.file, args.overrides).values
        else:
            if args.overrides:
                raise InputError(f"{args.file}: overrides (section.key=value) apply to a scenario (.toml), not to "
                                 "a result file")
            from .report import read_summary

            read_summary(args.file)  # a meshsim result, or a clear error
            values = values_of_file(args.file)
    print(format_table(values))
    return 0


def _cmd_sweep(args) -> int:
    import functools

    from .sweep import SweepInterrupted, dask_client, format_points, format_result, load_sweep, run_sweep

    jobqueue = {"--queue": args.queue, "--account": args.account, "--walltime": args.walltime, "--cores": args.cores,
                "--memory": args.memory, "--jobs": args.jobs}
    problems = [f"{k}: applies only with --cluster slurm|pbs" for k, v in jobqueue.items()
                if v is not None and args.cluster is None]
    remote = args.scheduler or args.scheduler_file or args.cluster
    if args.serial and remote:
        problems.append("--serial: runs the points in this process; it cannot be combined with --scheduler, "
                        "--scheduler-file or --cluster")
    if args.workers is not None and (remote or args.serial):
        problems.append("--workers: applies only to the local cluster (with --cluster, give --jobs and --cores)")
    if args.dashboard and (args.serial or args.scheduler or args.scheduler_file):
        problems.append("--dashboard: applies only to a cluster this command starts")
    if args.insecure and not remote:
        problems.append("--insecure: applies only with --scheduler, --scheduler-file or --cluster")
    if not remote and not args.dry_run:  # points run on this host: never more threads than it has cores
        from .sweep import host_cores

        cores = host_cores()
        if args.threads > cores:
            problems.append(f"--threads {args.threads}: more than this host's {cores} core(s); a point runs at most "
                            f"{cores} thread(s) here")
        elif args.workers is not None and args.workers * args.threads > cores:
            problems.append(f"--workers {args.workers} with --threads {args.threads}: {args.workers * args.threads} "
                            f"threads at once on this host's {cores} core(s), which only slows every point; at most "
                            f"{max(1, cores // args.threads)} worker(s)")
    if problems:
        raise InputError(problems)
    sweep = load_sweep(args.sweep, args.output, threads=args.threads)
    if args.dry_run:
        print(format_points(sweep))
        return 0
    try:
        connect = None if args.serial else functools.partial(
            dask_client, scheduler=args.scheduler, scheduler_file=args.scheduler_file, cluster=args.cluster,
            workers=args.workers, dashboard=args.dashboard, queue=args.queue, account=args.account,
            walltime=args.walltime, cores=args.cores, memory=args.memory, jobs=args.jobs or 1,
            threads=args.threads, insecure=args.insecure, shared_dir=sweep.output)
        res = run_sweep(sweep, connect=connect, progress=None if not args.quiet else False)
    except SweepInterrupted as e:
        print(f"meshsim: {e}", file=sys.stderr)
        return 1 if e.why else 130
    if not args.quiet:
        print(format_result(res))
    if res.failed:
        print(f"meshsim: {res.failed} point(s) failed; their errors are in {sweep.summary_csv}", file=sys.stderr)
        return 1
    return 0


def _cmd_accuracy(args) -> int:
    import json

    from .accuracy import SHIPPED, envelope, evaluate, format_rows, read_table

    tables = ([] if args.no_shipped else [SHIPPED]) + [p for p in args.table or []]
    if not tables:
        raise InputError("--no-shipped without --table: no cases to run")
    cases = [c for t in tables for c in read_table(t)]
    if args.only:
        cases = [c for c in cases if args.only.lower() in c.case.lower()]
        if not cases:
            raise InputError(f"--only {args.only!r}: no case's name contains it")
    if args.skip:
        cases = [c for c in cases if args.skip.lower() not in c.case.lower()]
        if not cases:
            raise InputError(f"--skip {args.skip!r}: every case left to run{' after --only' if args.only else ''} "
                             "has it in its name, so none would run")

    def progress(done, total, label):
        if not args.json and not args.quiet:
            print(f"  [{done}/{total}] {label}", file=sys.stderr, flush=True)

    if args.cross_validate:
        return _cross_validate(args, cases)
    rows = evaluate(cases, progress)
    if args.json:
        print(json.dumps(dict(cases=rows, envelope=envelope(rows)), indent=1, default=str))
    else:
        print(format_rows(rows))
    e = envelope(rows)
    if e["could_not_run"]:  # each in its row: the others ran
        for r in rows:
            if r["status"] == "could not run":
                print(f"meshsim: error: {r['origin']}: {r['case']}: could not run: {r['why']}", file=sys.stderr)
        return 2
    return 1 if args.check and e["outside"] else 0


def _cross_validate(args, cases) -> int:
    import json

    from .calibrate import calibration_rows, cross_validate, format_cross_validation, start_values

    keys = _fit_keys(args.fit, cases, "--cross-validate")
    fitted = start_values(calibration_rows(cases, keys), keys)

    def progress(n, group, f):
        if not args.json and not args.quiet:
            print(f"  left out {group}: refit {_shown_values(f.values)} ({f.evaluations} evaluations)",
                  file=sys.stderr, flush=True)

    out = cross_validate(cases, keys, fitted, progress)
    if args.json:
        print(json.dumps(dict(keys=list(keys), fitted=fitted, rows=out), indent=1, default=str))
    else:
        print(format_cross_validation(out))
    return 0


def _fit_keys(fit: str | None, cases: list, where: str) -> tuple:
    """The keys to fit: --fit's, else those the table's calibration rows name in their fit column."""
    from .calibrate import check_keys, table_keys

    keys = check_keys(fit) if fit else table_keys(cases)
    if not keys:
        raise InputError(f"{where}: no --fit given and no calibration row names a key in its fit column: "
                         "name the keys to fit, e.g. --fit machine.section_switch_cycles")
    return keys


def _shown_values(values: dict) -> str:
    """Fitted values on one line: key=value, the section left out."""
    return ", ".join(f"{k.partition('.')[2]}={v:.6g}" for k, v in values.items())


def _cmd_calibrate(args) -> int:
    import hashlib

    from . import files
    from .accuracy import read_table, read_table_bytes
    from .calibrate import fit, format_fit, preset_text

    data = read_table_bytes(args.table)  # read once: the digest is of the table fitted
    cases = read_table(args.table, data)
    keys = _fit_keys(args.fit, cases, args.table)
    out = Path(args.output) if args.output else Path(args.table).with_suffix(".preset.toml")
    files.check_target(out, "preset file")
    if not out.parent.is_dir():
        raise InputError(f"-o {out}: no such folder {out.parent}")

    def progress(n, c, values):
        if not args.quiet:
            print(f"  [{n}] {_shown_values(values)}: sum of squared log errors {c:.4g}", file=sys.stderr, flush=True)

    f = fit(cases, keys, progress)
    print(format_fit(f, args.table))
    text = preset_text(f, Path(args.table).name, hashlib.sha256(data).hexdigest())
    files.write_through_temporary(out, "preset file", lambda fh: fh.write(text.encode()))
    print(f"preset file: {out} (a scenario uses it with machine.preset_file = \"{out}\")")
    return 0


def _cmd_bench(args) -> int:
    from .bench import run_bench

    run_bench(json_out=args.json, quick=args.quick, cycles=args.cycles, sweep=args.sweep)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= 1")
    return value


class _Parser(argparse.ArgumentParser):
    """A subcommand's parser; with intermixed=True it reads options before, between or after its
    positionals (`parse_intermixed_args`), so a scenario's overrides may come on either side of
    `-o FILE`."""

    def __init__(self, *args, intermixed: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._any_order = intermixed
        self._inside = False

    def parse_known_args(self, args=None, namespace=None):
        if not self._any_order or self._inside:  # _inside: the two passes of parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="meshsim", description="Cycle-approximate simulator of spatial AI accelerators "
                                "for load-balance studies.")
    p.add_argument("--version", action="version", version=f"meshsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", intermixed=True, help="run a scenario and write its HDF5 result")
    r.add_argument("scenario", nargs="?", help="scenario TOML file")
    r.add_argument("overrides", nargs="*", metavar="section.key=value", help="override scenario values")
    r.add_argument("-o", "--output", help="result file (default results/NAME.h5)")
    r.add_argument("--resume", metavar="RESULT.incomplete.h5",
                   help="go on with a stopped run from its last checkpoint (mesh and ipu runs), to the file an "
                        "uninterrupted run writes")
    r.add_argument("--threads", type=int, default=None,
                   help="Numba threads (default run.threads; 0 = one per 32,768 PEs, up to the cores)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    r.set_defaults(func=_cmd_run)

    v = sub.add_parser("validate", intermixed=True, help="check a scenario without running it")
    v.add_argument("scenario")
    v.add_argument("overrides", nargs="*", metavar="section.key=value")
    v.add_argument("--resolved", action="store_true", help="print the scenario with every default filled in")
    v.set_defaults(func=_cmd_validate)

    rep = sub.add_parser("report", help="figures of a result file recomputed from its datasets, with a diagnosis; "
                                        "several files side by side")
    rep.add_argument("result", nargs="+", help="result file(s)")
    rep.add_argument("--json", action="store_true", help="machine-readable JSON")
    rep.add_argument("--window", type=int, default=None, help="window length in cycles (mesh: a multiple of the "
                     "run's window_cycles)")
    rep.add_argument("--target", type=float, default=None, help="the LI to diagnose against (default: mesh 0.98, "
                     "rdu 0.85, ipu 0.80)")
    rep.set_defaults(func=_cmd_report)

    pl = sub.add_parser("plot", help="draw a result file's figures (heat map, animation, timeline, latency, busy "
                                     "time, links, Gantt, roofline, generation), or a metric of a sweep's table "
                                     "(.csv)")
    pl.add_argument("result", help="result file (.h5), or a sweep's summary table (.csv)")
    pl.add_argument("--kind", action="append", help="plot kinds, comma-separated or repeated (default: every kind "
                    "the file has data for): heatmap, animation, timeline, latency, busy, links, gantt, roofline, "
                    "generation")
    pl.add_argument("-o", "--output", help="folder for the figures (default: beside the file, named after it)")
    pl.add_argument("--format", default="png", help="png (default), svg or pdf")
    pl.add_argument("--cycle", type=int, default=None, help="heatmap: the frame nearest this cycle (default: last)")
    pl.add_argument("--metric", help="sweep table: the summary column to draw, e.g. li")
    pl.add_argument("--x", help="sweep table: the swept key on the x axis, e.g. migration.threshold (keys "
                                "joined by + make one axis of their values together)")
    pl.add_argument("--y", help="sweep table: a second swept key, for a heat map (keys joined by + as for --x)")
    pl.set_defaults(func=_cmd_plot)

    ex = sub.add_parser("export", help="write a result file's timeline for another tool: --format perfetto, the "
                                       "Chrome trace-event JSON that ui.perfetto.dev and chrome://tracing open")
    ex.add_argument("result", help="result file (.h5), complete or not")
    ex.add_argument("--format", default="perfetto", help="perfetto (the default and, for now, the only one)")
    ex.add_argument("-o", "--output", help="the trace file (default: beside the result, NAME.trace.json)")
    ex.add_argument("--points", type=int, default=2000, help="most points of a counter track: longer series are "
                    "averaged over equal runs of cycles (default 2,000)")
    ex.add_argument("--slices", type=int, default=200_000, help="most slices in the trace: the earliest are kept, "
                    "and the trace's otherData.notes say what was left out (default 200,000)")
    ex.set_defaults(func=_cmd_export)

    rf = sub.add_parser("roofline", intermixed=True, help="the platforms' rooflines and a scenario's or result's "
                        "kernels on its own")
    rf.add_argument("file", nargs="?", help="a scenario (.toml) or result file (.h5)")
    rf.add_argument("overrides", nargs="*", metavar="section.key=value", help="override scenario values")
    rf.set_defaults(func=_cmd_roofline)

    sw = sub.add_parser("sweep", help="run a scenario at many points of its parameters (a sweep file), on a local "
                                      "Dask cluster, an existing one, SLURM or PBS")
    sw.add_argument("sweep", help="sweep TOML file (docs/sweeps.md)")
    sw.add_argument("--dry-run", action="store_true", help="list the points and which are complete; run nothing")
    sw.add_argument("-o", "--output", help="results folder (default: the file's sweep.output, else "
                    "results/sweeps/NAME)")
    sw.add_argument("--serial", action="store_true", help="run the points one after another in this process, "
                    "without Dask")
    sw.add_argument("--workers", type=_positive_int, default=None, help="local cluster: worker processes (default: "
                    "one per core, or per THREADS cores)")
    sw.add_argument("--threads", type=_positive_int, default=1, help="Numba threads per point (default 1); the "
                    "clusters then run one worker per THREADS cores")
    sw.add_argument("--dashboard", action="store_true", help="serve Dask's dashboard (needs bokeh)")
    where = sw.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="tls://HOST:PORT", help="run on an existing Dask cluster (tls:// with "
                       "the certificates of your Dask configuration; tcp:// only on this machine, unless --insecure)")
    where.add_argument("--scheduler-file", metavar="FILE", help="run on the Dask cluster that wrote FILE")
    where.add_argument("--cluster", choices=("slurm", "pbs"), help="start workers as batch jobs (dask-jobqueue)")
    sw.add_argument("--queue", help="--cluster: the queue (SLURM partition)")
    sw.add_argument("--account", help="--cluster: the account to charge")
    sw.add_argument("--walltime", help="--cluster: each job's time limit, e.g. 01:00:00")
    sw.add_argument("--cores", type=_positive_int, default=None, help="--cluster: cores per job (one "
                    "worker per core, or per THREADS cores)")
    sw.add_argument("--memory", help="--cluster: memory per job, e.g. 16GB")
    sw.add_argument("--jobs", type=_positive_int, default=None, help="--cluster: batch jobs to start (default 1)")
    sw.add_argument("--insecure", action="store_true", help="allow an unencrypted tcp:// scheduler on another "
                    "machine, and --cluster without TLS (for sites where TLS cannot work): anyone who can reach the "
                    "scheduler's port can then run code as you")
    sw.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no closing summary")
    sw.set_defaults(func=_cmd_sweep)

    ac = sub.add_parser("accuracy", help="the model's figures against reference values (analytic results, "
                        "published measurements, a CSV of your own), each with its error; the shipped cases took "
                        "6.5 min on two quiet cores with the kernels compiled")
    ac.add_argument("--table", action="append", metavar="CSV", help="a reference table of your own (columns "
                    "scenario, overrides, figure, reference, source; docs/design.md, \"Accuracy\"); repeatable")
    ac.add_argument("--no-shipped", action="store_true", help="leave out the shipped cases")
    ac.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT")
    ac.add_argument("--skip", metavar="TEXT", help="leave out the cases whose name contains TEXT (e.g. CS-2, whose "
                    "full-wafer training run takes minutes)")
    ac.add_argument("--json", action="store_true", help="print the cases and the envelope as JSON")
    ac.add_argument("--check", action="store_true", help="exit 1 when a case lies outside its tolerance (a case "
                    "that could not run is reported in its row, and makes the command exit 2, either way)")
    ac.add_argument("--cross-validate", action="store_true", help="refit the keys of the calibration rows' fit "
                    "column (or --fit) leaving out one group of rows (one model) at a time, and print each left-out "
                    "row's error beside its error under the shipped fit")
    ac.add_argument("--fit", metavar="KEY[,KEY...]", help="with --cross-validate: the keys to refit")
    ac.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    ac.set_defaults(func=_cmd_accuracy)

    ca = sub.add_parser("calibrate", help="fit machine keys to a reference table (least squares on the log of "
                        "model / measured) and write them as a preset file")
    ca.add_argument("table", help="a reference table (as meshsim accuracy reads; its calibration rows are fitted)")
    ca.add_argument("--fit", metavar="KEY[,KEY...]", help="the numeric machine keys to fit (default: those the "
                    "calibration rows name in their fit column)")
    ca.add_argument("-o", "--output", metavar="FILE", help="the preset file to write (default: beside the table, "
                    "TABLE.preset.toml)")
    ca.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    ca.set_defaults(func=_cmd_calibrate)

    b = sub.add_parser("bench", help="measure simulation speed, compile time, memory and output overhead; took 9.5 "
                       "min on two quiet cores (--quick: a small grid, for checking)")
    b.add_argument("--json", action="store_true", help="print the figures as JSON")
    b.add_argument("--quick", action="store_true", help="a small grid instead of the full fabric (for checking)")
    b.add_argument("--cycles", type=_positive_int, default=300, help="cycles per speed measurement (default 300)")
    b.add_argument("--sweep", action="store_true", help="instead, the sweep figures: per-point overhead on the local "
                   "cluster, and a 16-point sweep against running its points one after another")
    b.set_defaults(func=_cmd_bench)
    return p


def main(argv=None) -> int:
    try:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return _main(argv)
        finally:
            sys.stdout.flush()  # meet a closed pipe here, not in the interpreter's last flush
    except BrokenPipeError:
        if not _silence_closed_pipes():
            raise
        return 141


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning meant for the user (a key's old name, say) as one line of its own, not Python's
    file and line of the code that raised it."""
    if issubclass(category, FutureWarning):
        print(f"meshsim: warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _silence_closed_pipes() -> bool:
    """Point stdout and stderr, those of them whose reader is gone, at os.devnull, so that nothing
    more is written to a closed pipe (nor a note of it at exit); whether either was closed."""
    closed = [stream for stream in (sys.stdout, sys.stderr) if _is_closed(stream)]
    for stream in closed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    return bool(closed)


def _is_closed(stream) -> bool:
    """Whether `stream` writes into a pipe (or socket) nobody reads any more."""
    try:
        poller = select.poll()  # a closed pipe polls as an error (Linux) or a hang-up
        poller.register(stream.fileno(), select.POLLOUT)
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
            return True
    except (AttributeError, OSError, ValueError):  # no poll here, or no file behind the stream
        pass
    try:
        stream.flush()  # what is still buffered fails if the pipe is closed
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        pass
    return False


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "threads", None) is not None and args.threads < 0:
            raise InputError(f"--threads = {args.threads}: must be an integer >= 0 (0 = one per 32,768 PEs, up to "
                             "the cores)")
        return args.func(args)
    except InputError as e:
        for line in e.problems:
            print(f"meshsim: error: {line}", file=sys.stderr)
        return 2
    except RunFailed as e:  # the run's surroundings failed it (a full disk): what was kept, how to go on
        for i, line in enumerate(e.lines):
            print(f"meshsim: {'error: ' if i == 0 else ''}{line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("meshsim: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the run's own interruption carries the path of what it kept
        from .run import RunInterrupted

        if isinstance(e, RunInterrupted):
            print(f"meshsim: {e}", file=sys.stderr)
            return 130
        raise


if __name__ == "__main__":
    sys.exit(main())

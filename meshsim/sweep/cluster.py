"""Where a sweep's points run: a Dask cluster started here (local, or batch jobs through
dask-jobqueue) or joined (a scheduler's address or file), with TLS unless --insecure, and the
checks before connecting (docs/sweeps.md, "Security"). The one module of meshsim that imports
`distributed`; the rest of the sweep reaches Dask through it or through the client it yields.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from distributed.diagnostics.plugin import WorkerPlugin

from .. import __version__, files
from ..errors import InputError
from .stop import stop_all


@contextlib.contextmanager
def dask_client(*, scheduler: str | None = None, scheduler_file: str | None = None, cluster: str | None = None,
                workers: int | None = None, dashboard: bool = False, queue: str | None = None,
                account: str | None = None, walltime: str | None = None, cores: int | None = None,
                memory: str | None = None, jobs: int = 1, threads: int = 1, insecure: bool = False,
                shared_dir=None):
    """A `distributed.Client` for a sweep, closed (with any cluster it started) on leaving.

    Default: an embedded LocalCluster on loopback with one single-threaded worker process per
    `threads` cores (`workers` to change it) and no dashboard unless `dashboard`. `scheduler`
    (tls://HOST:PORT, with the certificates of the user's Dask configuration) or `scheduler_file`
    (the address in it, read once: the address checked is the one connected to) joins a running
    cluster; an unencrypted address of another machine is refused unless `insecure`. `cluster` =
    "slurm" or "pbs" starts `jobs` batch jobs through dask-jobqueue, each with one single-threaded
    worker process per `threads` of its `cores`; queue, account, walltime and memory go to the job
    script (unset ones come from dask-jobqueue's configuration). Its
    scheduler and workers talk TLS (docs/sweeps.md, "Security") unless `insecure`; the workers'
    copies of a temporary authority's certificate and key are written in `shared_dir` (default:
    the current folder), which they must see at the same path, unless dask-jobqueue's
    configuration names a shared-temp-directory. `threads` is the Numba threads of each point.
    Workers find Numba's compiled kernels in the on-disk cache beside the package, or in
    NUMBA_CACHE_DIR, which the job scripts export when it is set here.
    """
    import logging

    from distributed import Client

    if scheduler is not None or scheduler_file is not None:
        if scheduler is not None:
            what, address = f"--scheduler {scheduler}", scheduler
        else:
            # Read once: the address checked here is the address connected to, whatever the file
            # says a moment later (Dask would read the file again to connect).
            address = _scheduler_file_address(scheduler_file)
            what = f"--scheduler-file {scheduler_file} ({address})"
        _check_scheduler_address(address, what, insecure)
        try:
            client = Client(address, timeout="20s")
        except Exception as e:  # refused, timed out, or an address that is not one
            raise InputError(f"{what}: cannot connect to the Dask scheduler ({type(e).__name__}: {e})") from None
        with client:
            _check_worker_versions(client, what)
            if not client.scheduler_info().get("workers"):
                print(f"meshsim: {what}: the cluster has no workers yet; the points start as workers join",
                      file=sys.stderr)
            yield client
        return
    if dashboard:
        import importlib.util

        if importlib.util.find_spec("bokeh") is None:
            raise InputError("--dashboard: Dask's dashboard needs bokeh; install it with pip install bokeh")
    import dask

    # Points are long: in a sweep of more than twice as many points as workers, the scheduler keeps
    # the points waiting to itself and hands a worker its next one only when it is free (Dask's
    # queuing), rather than lining them up behind a slow point or on a worker that may die.
    # The points are long and few: Dask's statistical profiler (a sample every 10 ms in every
    # worker), its 50 Hz event-loop tick and its 10 Hz memory and system monitors only take CPU from
    # the points on a small machine. Memory limits are still enforced, within a second.
    one_each = dask.config.set({"distributed.scheduler.worker-saturation": 1.0,
                                "distributed.worker.profile.enabled": False,
                                "distributed.admin.tick.interval": "500ms",
                                "distributed.admin.system-monitor.interval": "2s",
                                "distributed.worker.memory.monitor-interval": "1s"})
    if cluster is not None:
        with one_each, jobqueue_cluster(cluster, queue=queue, account=account, walltime=walltime, cores=cores,
                                         memory=memory, dashboard=dashboard, threads=threads, insecure=insecure,
                                         shared_dir=shared_dir) as jc:
            try:
                jc.scale(jobs=jobs)
                with Client(jc) as client:  # with the cluster's own security
                    print(f"meshsim: {jobs} {cluster} job(s) submitted; the points start as their workers join",
                          file=sys.stderr)
                    yield client
            finally:
                remove_certificate_files(jc)
        return
    from distributed import LocalCluster

    n = workers or max(1, host_cores() // threads)
    # Without --dashboard the scheduler's HTTP server (health checks only) takes any free loopback port.
    with one_each, LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address="127.0.0.1:8787" if dashboard else "127.0.0.1:0",
                                scheduler_kwargs={"dashboard": dashboard},
                                # The sweep reports every point's failure itself; Dask's own
                                # messages (a heartbeat cut short as the cluster closes) are noise.
                                silence_logs=logging.CRITICAL) as lc:
        with Client(lc) as client:
            client.register_plugin(StopOnInterrupt(), name="meshsim-stop-on-interrupt")
            if dashboard:
                print(f"dashboard: {client.dashboard_link}", file=sys.stderr)
            yield client


class StopOnInterrupt(WorkerPlugin):
    """A Dask worker plugin for the workers of a cluster this process starts: Ctrl-C on a terminal
    reaches every process of the group; a worker then stops its run at the next kernel-call boundary
    (keeping an incomplete file) instead of dying, and the sweep shuts the cluster down. Set up again
    on every worker the nanny restarts."""

    def setup(self, worker):
        import signal

        signal.signal(signal.SIGINT, stop_all)


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _worker_version() -> str:
    from meshsim import __version__ as v

    return v


def _check_worker_versions(client, what: str) -> None:
    """Every worker must run this meshsim: another version could resolve or run a point differently."""
    try:
        versions = client.run(_worker_version)
    except Exception as e:  # a worker without meshsim cannot even import the function
        raise InputError(f"{what}: the workers cannot run meshsim ({type(e).__name__}: {e}); install this meshsim "
                         f"({__version__}) in the workers' environment") from None
    other = {addr: v for addr, v in versions.items() if v != __version__}
    if other:
        raise InputError(f"{what}: workers run another meshsim version ({', '.join(sorted(set(other.values())))}); "
                         f"this one is {__version__}")


def _scheduler_file_address(path) -> str:
    """The scheduler's address in a scheduler file (a JSON object with an "address" string, as
    `dask scheduler --scheduler-file FILE` writes it), read once (meshsim.files.read_bounded), so
    that the address checked is the address connected to; InputError naming the file if it has none."""
    where = f"--scheduler-file {path}"
    if not os.path.lexists(path):
        raise InputError(f"{where}: no such file (the scheduler writes it when it starts: dask scheduler "
                         "--scheduler-file FILE)")
    data = files.read_bounded(path, where, "scheduler file")
    try:
        info = json.loads(data)
    except (ValueError, RecursionError):  # empty, not UTF-8, not JSON, or nested beyond reading
        info = found = "is empty" if not data.strip() else "is not JSON"
    else:
        found = "is JSON but not an object"
    if isinstance(info, dict):
        address = info.get("address")
        if isinstance(address, str) and address.strip():
            return address.strip()
        shown = json.dumps(address)
        found = (f'has "address": {shown if len(shown) <= 60 else shown[:57] + "..."}, not an address'
                 if "address" in info else 'has no "address"')
    raise InputError(f"{where}: {found}; a scheduler file is the JSON object that dask scheduler --scheduler-file "
                     'FILE writes, whose "address" is the scheduler\'s, such as "tls://10.0.0.5:8786" (a scheduler '
                     "still starting may not have written it yet: run the sweep again once it has)")


def _is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1; a name is never looked up."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_scheduler_address(address: str, what: str, insecure: bool) -> None:
    """Refuse, before connecting, an unencrypted scheduler on another machine (unless `insecure`):
    whoever reaches its port can submit code to run as this user on its workers. A tls:// (or
    wss://) scheduler needs this side's certificates in the user's Dask configuration."""
    import dask
    from distributed import Security
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address, strict=False)
        host = parse_host_port(loc, 8786)[0] if scheme != "inproc" else "localhost"
    except ValueError:  # connecting says what is wrong with it
        return
    if scheme in ("tls", "wss"):
        sec = Security()
        if not (sec.tls_ca_file and sec.tls_client_cert) and not dask.config.get(
                "distributed.client.security-loader", None):
            raise InputError(f"{what}: a {scheme}:// scheduler needs your certificates in Dask's configuration "
                             "(distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and .key)")
        return
    if not insecure and not _is_loopback(host):
        raise InputError(f"{what}: refused: {scheme}:// is unencrypted and unauthenticated, and anyone who can reach "
                         "that port can run code as you on its workers; use a tls:// scheduler (certificates in your "
                         "Dask configuration), or give --insecure to connect anyway")


def _cluster_security(kind: str):
    """The TLS settings of a batch cluster: the certificates named in the user's Dask configuration
    (distributed.comm.tls.*), else a temporary certificate authority made for this cluster alone."""
    from distributed import Security

    sec = Security()
    named = {"distributed.comm.tls.ca-file": sec.tls_ca_file,
             "distributed.comm.tls.scheduler.cert": sec.tls_scheduler_cert,
             "distributed.comm.tls.worker.cert": sec.tls_worker_cert,
             "distributed.comm.tls.client.cert": sec.tls_client_cert}
    if any(named.values()):
        missing = [k for k, v in named.items() if not v]
        if missing:
            raise InputError(f"--cluster {kind}: your Dask configuration names TLS certificates but not "
                             f"{', '.join(missing)}; name all four (or none, for a temporary authority)")
        return sec
    try:
        return Security.temporary()
    except ImportError:
        raise InputError(f"--cluster {kind}: TLS with a temporary certificate authority needs cryptography; install "
                         "it with pip install 'meshsim[cluster]' (or name certificates in your Dask configuration, or "
                         "give --insecure)") from None


def remove_certificate_files(jc) -> None:
    """Delete the files of a temporary authority's certificate and key that dask-jobqueue wrote for
    the workers: it keeps them open as temporary files (deleted on closing) in _job_<key>, and
    would otherwise delete them only when the cluster object is collected."""
    for key in ("ca_file", "cert", "key"):
        f = getattr(jc, f"_job_{key}", None)
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def jobqueue_cluster(kind: str, *, queue, account, walltime, cores, memory, dashboard, threads: int = 1,
                      insecure: bool = False, shared_dir=None):
    """A dask-jobqueue cluster of `kind` (slurm or pbs), not yet scaled: each job runs one
    single-threaded worker process per `threads` of its cores (given, or from the configuration).

    Unless `insecure`, its scheduler listens on tls:// and the job script carries the workers'
    --tls-ca-file, --tls-cert and --tls-key: the configuration's certificates, or the files
    dask-jobqueue writes (readable by this user only) of a temporary authority, in its configured
    shared-temp-directory or else in `shared_dir` (default: the current folder)."""
    import shlex

    import dask

    try:
        import dask_jobqueue
    except ImportError:
        raise InputError(f"--cluster {kind}: needs dask-jobqueue; install it with pip install 'meshsim[cluster]'") \
            from None
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
    job_cores = cores if cores is not None else dask.config.get(f"jobqueue.{kind}.cores", None)
    prologue = [f"export NUMBA_NUM_THREADS={threads}"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        prologue.append(f"export NUMBA_CACHE_DIR={shlex.quote(os.environ['NUMBA_CACHE_DIR'])}")
    kw = dict(queue=queue, account=account, walltime=walltime, cores=cores, memory=memory, python=sys.executable,
              job_script_prologue=prologue,
              scheduler_options={"dashboard": dashboard, "dashboard_address": ":8787" if dashboard else ":0"},
              job_name="meshsim")
    if job_cores:
        # One worker process per `threads` cores, each running one point at a time: dask-jobqueue
        # gives a worker cores / processes task threads, so it is told of one core per worker and
        # the job asks the batch system for them all.
        kw["processes"] = kw["cores"] = max(1, job_cores // threads)
        if threads > 1 and kind == "slurm":
            kw["job_cpu"] = job_cores
        elif threads > 1:
            from dask.utils import parse_bytes
            from dask_jobqueue.pbs import pbs_format_bytes_ceil

            job_memory = memory if memory is not None else dask.config.get("jobqueue.pbs.memory", None)
            kw["resource_spec"] = f"select=1:ncpus={job_cores}" + (
                f":mem={pbs_format_bytes_ceil(parse_bytes(job_memory))}" if job_memory else "")
    if not insecure:
        kw["security"] = _cluster_security(kind)
        temporary = "\n" in kw["security"].tls_ca_file  # in memory, not a file's path
        if temporary and dask.config.get(f"jobqueue.{kind}.shared-temp-directory", None) is None:
            folder = os.path.abspath(shared_dir if shared_dir is not None else os.getcwd())
            if shlex.quote(folder) != folder:  # dask-jobqueue writes the paths into the script unquoted
                raise InputError(f"--cluster {kind}: the workers' certificate files would go in {folder}, whose name "
                                 f"the job script cannot carry; set jobqueue.{kind}.shared-temp-directory in Dask's "
                                 "configuration to a folder the workers see, named without spaces or quotes")
            kw["shared_temp_directory"] = folder
    kw = {k: v for k, v in kw.items() if v is not None}
    try:
        return cls(**kw)
    except ValueError as e:  # e.g. no cores or memory given here or in the jobqueue configuration
        why = " ".join(str(e).split())
        if "cores" in why or "memory" in why:
            why += " (give --cores and --memory, or set them in dask-jobqueue's configuration)"
    except OSError as e:  # the certificate files could not be written
        why = f"cannot write the workers' certificate files ({' '.join(str(e).split())})"
    # Raised out here, so that nothing keeps the half-made cluster, and the certificate files it wrote, alive.
    raise InputError(f"--cluster {kind}: {why}")


def as_completed(futures):
    """distributed.as_completed over the futures: each as it finishes."""
    from distributed import as_completed

    return as_completed(futures)


def is_cancelled(error: BaseException) -> bool:
    """Whether a future's error says that the cluster stopped running it (its scheduler went away,
    or cancelled it)."""
    from distributed.client import FutureCancelledError

    return isinstance(error, FutureCancelledError)

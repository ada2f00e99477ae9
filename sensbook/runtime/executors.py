"""Running a sweep's missing configurations on a cluster: Slurm through submitit.

:func:`~sensbook.runtime.sweep.run_sweep` computes missing configurations in processes of this
machine by default. Given an executor from this module
(``run_sweep(..., executor=SubmititExecutor())``, or ``sensbook sweep ... --executor slurm`` on
the command line) it hands them to
`submitit <https://github.com/facebookincubator/submitit>`_ instead:

* ``kind="slurm"``: one Slurm **job array** (``sbatch``), one array task per missing
  configuration, with the partition, time limit, CPUs, GPUs and memory of one task and the
  number of tasks running at once (``array_parallelism``);
* ``kind="local"``: submitit's local executor, the same jobs as subprocesses of this machine
  (for tests and small sweeps, no cluster needed), in waves of at most as many jobs as the
  machine holds (one per core and per ``WORKER_MB``, the process pool's bound).

Every job runs :func:`sensbook.sweep._run_one`, the function the process pool runs, so a job
stores its result in the same store (``out/<experiment>/<key>.json``; on a cluster ``out`` must
be a folder every node sees) as soon as it finishes. Job bookkeeping lives beside the store, in
``out/.submitit/<experiment>/``: submitit's pickles and logs, and ``jobs.json`` (key -> job id
and log paths of the latest submission of each configuration), so that a later call, in another
process, can tell every configuration's state (:func:`status`):

``stored``
    its result is in the store (whatever computed it);
``queued`` / ``running``
    its job is in the queue (``squeue``) or, for local jobs, its process is alive (the pid
    *and* the start time recorded at submission: a pid is reused); or another live runner
    holds its claim (a job whose configuration another runner computes waits for it);
``failed``
    its job is gone and stored nothing: the error is the Python traceback submitit recorded, or,
    when the job was cancelled, timed out or killed, the end of its stderr log (where Slurm
    writes ``CANCELLED``, ``DUE TO TIME LIMIT``, ...). A failed configuration is submitted again
    by the next sweep, and only it is recomputed;
``missing``
    never submitted (or its bookkeeping was deleted);
``unknown``
    (``--status`` only) its job was submitted to Slurm but the queue cannot be read here.
    What cannot be read (a damaged ``jobs.json``, a store path that is a file) is named.

States come from ``squeue`` and the files, never from ``sacct`` (which needs a Slurm accounting
database that many small clusters do not run).
"""
from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass

from .store import MAX_RECORD_BYTES, UnsafeFile, pid_alive, process_start, read_regular

KINDS = ("slurm", "local")
STATES = ("stored", "queued", "running", "failed", "missing")
_RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")


def _positive(value, argument, *, allow_none=False, zero=False):
    if value is None and allow_none:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise ValueError(f"{argument} must be an integer >= {0 if zero else 1}, got {value!r}")
    return value


def bookkeeping(root, name) -> pathlib.Path:
    """The folder of submitit's files and ``jobs.json`` for sweep ``name`` under store ``root``."""
    return pathlib.Path(root) / ".submitit" / name


_ENTRY_KEYS = ("kind", "job_id", "stderr", "result")


def _load_jobs(folder: pathlib.Path, problems: list | None = None) -> dict:
    """``jobs.json`` of ``folder`` (key -> entry); {} when there is none. What cannot be read
    (not JSON, not an object, an entry without its fields, a path that is no folder) is left
    out and said in ``problems`` (else in a warning)."""
    path = folder / "jobs.json"
    said = []
    try:
        jobs = json.loads(read_regular(path, MAX_RECORD_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        said.append(f"{path} is unreadable ({type(e).__name__}: {str(e)[:120]}); its jobs are "
                    "not shown")
        jobs = {}
    if not isinstance(jobs, dict):
        said.append(f"{path} holds a JSON {type(jobs).__name__}, not an object; its jobs are "
                    "not shown")
        jobs = {}
    bad = [k for k, e in jobs.items() if not isinstance(e, dict)
           or not all(isinstance(e.get(f), str) for f in _ENTRY_KEYS)]
    if bad:
        said.append(f"{path}: {len(bad)} entr{'y' if len(bad) == 1 else 'ies'} without "
                    f"{', '.join(_ENTRY_KEYS)} (e.g. {bad[0][:20]!r}) are not shown")
    for msg in said:
        if problems is None:
            warnings.warn(msg, stacklevel=3)
        else:
            problems.append(msg)
    return {k: e for k, e in jobs.items() if k not in bad}


def _ready_jobs_file(folder: pathlib.Path) -> None:
    """Before submitting: the folder exists and ``jobs.json`` can be replaced. Something at its
    path that is not a regular file (a directory, a FIFO) is moved aside with a warning, as a
    damaged record is; OSError naming it, before any job is submitted, when that fails."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "jobs.json"
    if os.path.lexists(path) and not path.is_file():
        aside = path.with_name(f"jobs.json.bad-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.replace(path, aside)
        except OSError as e:
            raise OSError(f"{path} is not a regular file and cannot be moved aside ({e}); no job "
                          "was submitted") from None
        warnings.warn(f"{path} was not a regular file; moved aside to {aside.name}", stacklevel=3)


def _save_jobs(folder: pathlib.Path, jobs: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".jobs.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(jobs, fh, indent=1, sort_keys=True)
    os.replace(tmp, folder / "jobs.json")


def _squeue() -> dict:
    """Job id (``123`` or ``123_4``) -> Slurm state of this user's jobs; RuntimeError saying
    why when the queue cannot be read (no squeue here, no controller reachable)."""
    try:
        out = subprocess.run(["squeue", "--me", "-h", "-r", "-o", "%i|%T"], capture_output=True,
                             text=True, timeout=60)
    except FileNotFoundError:
        raise RuntimeError("jobs were submitted to Slurm but squeue is not available here "
                           "(run --status on a login node of the cluster)") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError("squeue did not answer within 60 s") from None
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()[-300:]}")
    return dict(line.split("|", 1) for line in out.stdout.split() if "|" in line)


def _alive(entry: dict) -> bool:
    """Whether local job ``entry`` still runs: its pid runs (a zombie, finished but not reaped,
    does not) and is still the job's process: the same start time as recorded at submission
    (a pid is reused), or, for entries from before start times were recorded, a submitit
    process."""
    pid, start = entry["job_id"], entry.get("start")
    if start is not None:
        return pid_alive(pid, start)
    if process_start(pid) is None:
        return False
    try:
        cmdline = pathlib.Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"submitit" in cmdline


#: The most bytes of a job's log read (its end), and of submitit's result file.
MAX_LOG_BYTES = 1 << 16


def _tail(path, lines=25) -> str:
    """The last ``lines`` lines of a job's log: read only when a regular file, and only its
    last ``MAX_LOG_BYTES`` (a FIFO or ``/dev/zero`` at its path is named, never read)."""
    try:
        data = read_regular(path, MAX_LOG_BYTES, tail=True)
    except UnsafeFile as e:
        return f"(its log {path} {e}: not read)"
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _error(entry: dict) -> str:
    """What a finished job that stored nothing left behind: submitit's traceback, else the end
    of its stderr log."""
    try:
        outcome, value = pickle.loads(read_regular(entry["result"], MAX_RECORD_BYTES))
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError):
        outcome, value = None, None
    if outcome == "error":
        return str(value).rstrip()
    log = _tail(entry["stderr"])
    head = (f"job {entry['job_id']} finished but stored no result" if outcome == "success" else
            f"job {entry['job_id']} ended without a result (cancelled, timed out or killed)")
    where = entry["stderr"]
    return f"{head}; end of {where}:\n{log}" if log else f"{head}; no log at {where}"


@dataclass
class ConfigStatus:
    """The state of one configuration (see the module's docstring)."""

    config: dict
    key: str
    state: str
    job_id: str | None = None
    error: str | None = None


def status(root, name, version_, configs, problems: list | None = None) -> list:
    """One :class:`ConfigStatus` per configuration of sweep ``name`` (store ``root``, code
    version ``version_``), in order. With a list ``problems``, what cannot be read (a damaged
    ``jobs.json``, a store path that is a file, a Slurm queue that cannot be asked) is said
    there and the configurations it concerns are ``unknown``; without one, a Slurm queue that
    cannot be asked is a RuntimeError (a sweep must not resubmit what may be running)."""
    from .store import Claim, Store, key

    strict = problems is None
    problems = [] if strict else problems
    root = pathlib.Path(root)
    if root.exists() and not root.is_dir():
        problems.append(f"the store path {root} is a file, not a folder: nothing can be stored "
                        "there")
    folder = bookkeeping(root, name)
    jobs = _load_jobs(folder, None if strict else problems)
    queue, no_queue = {}, None
    if any(e["kind"] == "slurm" for e in jobs.values()):
        try:
            queue = _squeue()                          # before reading the store: no race
        except RuntimeError as e:
            if strict:
                raise
            no_queue = str(e)
            problems.append(f"the Slurm queue cannot be read ({no_queue}); the state of "
                            "submitted jobs is unknown")
    store = Store(root, name, version_)
    out = []
    for c in configs:
        k = key(c, version_)
        entry = jobs.get(k)
        if store.record(c) is not None:
            out.append(ConfigStatus(c, k, "stored", entry and entry["job_id"]))
        elif entry is None:
            out.append(ConfigStatus(c, k, "missing"))
        elif entry["kind"] == "slurm" and no_queue is not None:
            out.append(ConfigStatus(c, k, "unknown", entry["job_id"], no_queue))
        elif entry["kind"] == "slurm" and entry["job_id"] in queue:
            st = queue[entry["job_id"]]
            state = "running" if st in _RUNNING else "queued"
            out.append(ConfigStatus(c, k, state, entry["job_id"]))
        elif entry["kind"] == "local" and _alive(entry):
            out.append(ConfigStatus(c, k, "running", entry["job_id"]))
        elif store.record(c) is not None:                  # finished between the two reads
            out.append(ConfigStatus(c, k, "stored", entry["job_id"]))
        elif (info := Claim.info(store.claim_path(c))) is not None \
                and not Claim.stale(*info):                # another live runner computes it
            out.append(ConfigStatus(c, k, "running", entry["job_id"]))
        else:
            out.append(ConfigStatus(c, k, "failed", entry["job_id"], _error(entry)))
    return out


class SweepFailed(RuntimeError):
    """Some submitted configurations stored no result; the message holds each one's error."""


@dataclass
class SubmititExecutor:
    """Submits a sweep's missing configurations through submitit (see the module's docstring).

    ``partition`` (None: the cluster's default), ``time`` (minutes per configuration),
    ``cpus_per_task``, ``gpus_per_task`` (0: none), ``mem_gb`` (None: the cluster's default)
    and ``array_parallelism`` (tasks of the array running at once) are Slurm's; the local kind
    uses only ``time``. ``wait=False`` returns right after submitting; ``poll_s`` is how often
    waiting looks at the queue and the store.
    """

    kind: str = "slurm"
    partition: str | None = None
    time: int = 60
    cpus_per_task: int = 1
    gpus_per_task: int = 0
    mem_gb: int | None = None
    array_parallelism: int = 64
    wait: bool = True
    poll_s: float = 2.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not an executor; allowed: {', '.join(KINDS)}")
        _positive(self.time, "time (minutes)")
        _positive(self.cpus_per_task, "cpus_per_task")
        _positive(self.gpus_per_task, "gpus_per_task", zero=True)
        _positive(self.mem_gb, "mem_gb", allow_none=True)
        _positive(self.array_parallelism, "array_parallelism")
        if self.partition is not None and not (isinstance(self.partition, str) and self.partition):
            raise ValueError(f"partition must be a non-empty name or None, got {self.partition!r}")
        self.submitted: list = []       # job ids of the last run()
        self.in_flight: list = []       # configurations already queued or running, not resubmitted
        self.deferred: list = []        # local jobs left for the next run (wait=False)

    def _executor(self, folder: pathlib.Path, name: str):
        try:
            import submitit
        except ImportError:
            raise ImportError("the slurm and local executors need submitit: pip install submitit "
                              "(or pip install 'sensbook[cluster]')") from None
        logs = folder / "logs" / "%j"
        if self.kind == "local":
            ex = submitit.LocalExecutor(folder=logs)
            ex.update_parameters(timeout_min=self.time)
            return ex
        import shutil

        if shutil.which("sbatch") is None:
            raise RuntimeError("the slurm executor needs Slurm's sbatch on PATH (a login node of "
                               "a Slurm cluster); --executor submitit-local needs none")
        ex = submitit.SlurmExecutor(folder=logs)
        params = dict(job_name=f"sensbook-{name}", time=self.time, cpus_per_task=self.cpus_per_task,
                      array_parallelism=self.array_parallelism,
                      # torch uses the task's CPUs, not every core of the node
                      setup=[f"export OMP_NUM_THREADS={self.cpus_per_task}"])
        if self.partition:
            params["partition"] = self.partition
        if self.gpus_per_task:           # one task per job: the job's GPUs are the task's
            params["gpus_per_node"] = self.gpus_per_task
        if self.mem_gb:
            params["mem"] = f"{self.mem_gb}GB"
        ex.update_parameters(**params)
        return ex

    def run(self, jobs: list) -> None:
        """Submit ``jobs`` (argument tuples of :func:`~sensbook.sweep._run_one`, all of one sweep)
        except those already queued or running; with ``wait``, return when each is stored and
        raise :class:`SweepFailed` naming every one that failed, with its error. Local jobs go
        in waves no larger than the machine holds; without ``wait`` only the first wave is
        submitted and the rest is listed in ``deferred``."""
        from .store import key

        self.submitted, self.in_flight, self.deferred = [], [], []
        if not jobs:
            return
        root = pathlib.Path(jobs[0][0]).resolve()     # jobs may start in another folder
        jobs = [(root, *a[1:]) for a in jobs]
        name, version_ = jobs[0][1:3]
        folder = bookkeeping(root, name)
        configs = [a[4] for a in jobs]
        live = {s.key for s in status(root, name, version_, configs)
                if s.state in ("queued", "running")}
        todo = [a for a in jobs if key(a[4], version_) not in live]
        self.in_flight = [a[4] for a in jobs if key(a[4], version_) in live]
        if todo:
            ex = self._executor(folder, name)
            _ready_jobs_file(folder)                 # before submitting, not after
            at_once = len(todo)
            if self.kind == "local":                 # this machine's processes: what it holds
                from .sweep import bound_workers
                at_once = bound_workers(len(todo), what=f"{len(todo)} submitit-local jobs at once")
            for i in range(0, len(todo), at_once):   # in waves of at most at_once jobs
                if i and not self.wait:
                    self.deferred = [a[4] for a in todo[i:]]
                    break
                if i:
                    self._wait(root, name, version_, [a[4] for a in todo[i - at_once:i]],
                               check=False)
                self._submit(ex, folder, todo[i:i + at_once], version_)
        if self.wait:
            self._wait(root, name, version_, configs)

    def _submit(self, ex, folder, todo, version_):
        from .store import key
        from .sweep import _run_one

        submitted = ex.map_array(_run_one, *zip(*todo))
        book = _load_jobs(folder)
        for a, job in zip(todo, submitted):
            book[key(a[4], version_)] = {
                "kind": self.kind, "job_id": str(job.job_id), "stdout": str(job.paths.stdout),
                "stderr": str(job.paths.stderr), "result": str(job.paths.result_pickle),
                "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            if self.kind == "local":                 # a pid is reused: its start time is not
                book[key(a[4], version_)]["start"] = process_start(job.job_id)
        _save_jobs(folder, book)
        self.submitted += [str(j.job_id) for j in submitted]

    def _wait(self, root, name, version_, configs, check=True):
        from ..settings import progress

        bar = progress(total=len(configs), desc=f"{self.kind} {name}")
        try:
            while True:
                states = status(root, name, version_, configs)
                finished = [s for s in states if s.state in ("stored", "failed", "missing")]
                bar.update(len(finished) - bar.n)
                if len(finished) == len(states):
                    break
                time.sleep(self.poll_s)
        finally:
            bar.close()
        if not check:
            return
        if any(s.state != "stored" for s in states):     # a shared file system may show a
            time.sleep(min(10.0, 5 * self.poll_s))       # finished job's file a little late
            states = status(root, name, version_, configs)
        failed = [s for s in states if s.state != "stored"]
        if failed:
            raise SweepFailed(f"{name}: {len(failed)} of {len(states)} submitted configurations "
                              f"stored no result (rerun the sweep to resubmit only them):\n"
                              + "\n".join(describe(s) for s in failed))


def describe(s: ConfigStatus) -> str:
    """One configuration's state for a person: key, job id, config, and the error if any."""
    config = json.dumps(s.config, sort_keys=True)
    head = f"  {s.state:8s} {s.key}  job {s.job_id or '-':>10s}  {config}"
    if not s.error:
        return head
    return head + "\n" + "\n".join("      | " + line for line in s.error.splitlines())


def summary(states: list) -> str:
    """``stored 4, queued 1, running 1, failed 1, missing 0`` (and ``unknown k`` when the
    state of k configurations could not be read)."""
    unknown = sum(s.state == "unknown" for s in states)
    return ", ".join(f"{st} {sum(s.state == st for s in states)}" for st in STATES) \
        + (f", unknown {unknown}" if unknown else "")


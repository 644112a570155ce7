"""Run the Spark analysis job (spark/analyze.py) on run directories.

`analyze(run_dir)` runs `spark-submit --py-files <job package zip> spark/analyze.py <run_dir>`
on a local master, streams its output to the log, and returns `analysis/metrics.json`.
`spark_submit_argv()` / `application_path()` / `job_py_files()` / `spark_conf()` give the same
command to the Airflow DAG's SparkSubmitOperator.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections import deque
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..cluster import process, procs
from ..paths import cache_dir, share_dir
from ..errors import AnalysisError, LedgerError

log = logging.getLogger(__name__)

MASTER_ENV = "KAFKAPROOF_SPARK_MASTER"
DEFAULT_MASTER = "local[2]"
ANALYSIS_DIR = "analysis"
STDERR_TAIL = 40

# Sized for a 2-core, 24 GiB machine: in local mode the driver JVM does all the work.
# Used by `kafkaproof analyze` and by the DAGs' SparkSubmitOperator alike. No
# spark.sql.shuffle.partitions: the job sizes it from the ledger (a --conf still wins).
DEFAULT_CONF: dict[str, str] = {
    "spark.driver.memory": "6g",
    # Throughput collector: the job is a batch; G1's concurrent work costs CPU the 2 cores need.
    # C1 only: the job's many short stages spend more on C2 compiling than C2 code saves them
    # (the nightly's 14 runs: 72-76 s against 80-87 s; 1M values: 48 s against 47-52 s).
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -XX:TieredStopAtLevel=1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


# A large ledger's job runs long enough for C2's code to pay for its compiling: 10M values took
# 130 s with C1 and C2 against 192 s with C1 alone (bench/analysis.py); at 1M values they were even.
FULL_JIT_MIN_ROWS = 4_000_000
FULL_JIT_CONF = {"spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}


def ledger_rows(run_dir: Path) -> int:
    """Rows of a local run directory's ledger tables, from the Parquet footers (nothing is read)."""
    import pyarrow.parquet as pq
    return sum(pq.ParquetFile(p).metadata.num_rows for p in Path(run_dir).glob("*.parquet") if p.is_file())


def size_conf(locations: Sequence[Path | str]) -> dict[str, str]:
    """Settings for the size of what is analysed: the full JIT for large local ledgers (URIs are not looked at)."""
    rows = sum(ledger_rows(Path(d)) for d in locations if not is_uri(d) and Path(d).is_dir())
    return dict(FULL_JIT_CONF) if rows >= FULL_JIT_MIN_ROWS else {}


def application_path() -> Path:
    """Path of the Spark application: `spark/analyze.py` of the checkout or of the installed package."""
    return share_dir("spark") / "analyze.py"


JOB_PACKAGE = "kafkaproof_analysis"  # spark/kafkaproof_analysis/: the job's modules, beside its entry file
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the archive's bytes depend on the sources alone


def job_sources() -> list[tuple[str, bytes]]:
    """The job package's Python files as (path inside the zip, content), sorted."""
    root = share_dir("spark")
    files = sorted(p for p in (root / JOB_PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)
    if not files:
        raise AnalysisError(f"{root / JOB_PACKAGE}: the Spark job's package is missing; this installation of "
                            "kafkaproof is incomplete (reinstall it, or run from a checkout)")
    return [(p.relative_to(root).as_posix(), p.read_bytes()) for p in files]


def job_py_files() -> Path:
    """The job package zipped for spark-submit's --py-files: `<cache>/spark/kafkaproof_analysis-<digest>.zip`.

    Named by a digest of the sources and byte-for-byte reproducible (sorted entries, fixed dates, stored),
    so it is built once per version of the job and processes building it at once write the same file.
    """
    sources = job_sources()
    digest = hashlib.sha256()
    for name, data in sources:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    target = cache_dir() / "spark" / f"{JOB_PACKAGE}-{digest.hexdigest()[:16]}.zip"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp",
                                     delete=False) as tmp:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
            for name, data in sources:
                info = zipfile.ZipInfo(name, ZIP_DATE)
                info.external_attr = 0o644 << 16
                archive.writestr(info, data)
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, target)
    return target


def find_spark_submit(spark_submit: str | None = None) -> str:
    """spark-submit: the one given, else next to sys.executable (the venv), else on PATH."""
    if spark_submit:
        return spark_submit
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if not found:
        raise AnalysisError("spark-submit not found next to the Python interpreter nor on PATH; "
                            "install the analysis extra into this environment: pip install 'kafkaproof[analysis]' "
                            "(or a checkout's requirements.txt)")
    return found


def resolve_master(master: str = DEFAULT_MASTER) -> str:
    """The Spark master; the environment variable KAFKAPROOF_SPARK_MASTER overrides it."""
    return os.environ.get(MASTER_ENV) or master


def spark_conf(extra_conf: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Spark settings for the job: defaults overlaid with `extra_conf`."""
    conf = dict(DEFAULT_CONF)
    conf.update({str(k): str(v) for k, v in (extra_conf or {}).items()})
    return conf


def is_uri(location: str | Path) -> bool:
    """Pure: whether a run location is a URI (`hdfs://...`, `file:/...`) rather than a local path."""
    text = str(location)
    return "://" in text or text.startswith("file:")


def spark_submit_argv(run_dirs: Sequence[Path | str] | Path | str, master: str = DEFAULT_MASTER, spark_submit: str | None = None,
                      extra_conf: Mapping[str, Any] | None = None, app_args: Sequence[str] = ()) -> list[str]:
    """The full spark-submit command line analysing `run_dirs` (local paths, made absolute, or URIs as given)."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    argv = [find_spark_submit(spark_submit), "--master", resolve_master(master), "--name", "kafkaproof-analyze"]
    for k, v in spark_conf(extra_conf).items():
        argv += ["--conf", f"{k}={v}"]
    argv += ["--py-files", str(job_py_files())]
    return argv + [str(application_path()), *app_args,
                   *[str(d) if is_uri(d) else str(Path(d).resolve()) for d in run_dirs]]


def spark_env(base: Mapping[str, str] | None = None, master: str = DEFAULT_MASTER) -> dict[str, str]:
    """Environment in which spark-submit finds Spark and runs this interpreter for Python."""
    env = dict(os.environ if base is None else base)
    if resolve_master(master).startswith("local"):
        # A local driver binds to the host's first non-loopback address when the hostname
        # resolves to loopback; the job needs no network beyond this host.
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "SPARK_HOME" not in env:
        try:
            import pyspark

            env["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
        except ImportError:
            pass
    return env


def _run(argv: list[str], quiet: bool, master: str = DEFAULT_MASTER) -> None:
    log.info("running %s", " ".join(argv))
    tail: deque[str] = deque(maxlen=STDERR_TAIL)
    try:
        # Only the main thread's children: the kernel signals when the starting thread ends.
        started = process.die_with_parent(argv) if threading.current_thread() is threading.main_thread() else argv
        proc = subprocess.Popen(started, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=spark_env(master=master), bufsize=1)
    except OSError as exc:
        raise AnalysisError(f"could not start {argv[0]}: {exc}") from exc
    owner = f"spark-{os.getpid()}-{proc.pid}"
    with contextlib.suppress(Exception):  # recorded so `cluster down --all` stops a driver whose caller crashed
        procs.register(owner, "spark-submit", process.ref_for(proc.pid), command=argv)
    first_error: list[str] = []
    try:
        _stream(proc, tail, quiet, first_error)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        procs.unregister(owner)
    code = proc.returncode
    if code != 0:
        first = "first error:\n" + "\n".join(first_error) + "\n" if first_error else ""
        raise AnalysisError(f"spark-submit exited with {code}; {first}last output:\n" + "\n".join(tail))


FIRST_ERROR_LINES = 30  # the first error's traceback, kept apart: a later crash's stack would push it out


def _stream(proc: subprocess.Popen, tail: deque, quiet: bool, first_error: list[str] | None = None) -> None:
    """Log the job's output as it comes: its own [analyze] lines at INFO, Spark's at DEBUG. The
    failure tail gets every line but Spark's INFO; `first_error` the first `[analyze] error` and
    what follows it."""
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        if first_error is not None and (first_error or line.startswith("[analyze] error")) \
                and len(first_error) < FIRST_ERROR_LINES:
            first_error.append(line)
        if " INFO " not in line:  # Spark's INFO chatter stays out of the failure tail
            tail.append(line)
        if line.startswith("[analyze]"):
            (log.debug if quiet else log.info)("%s", line)
        else:
            log.debug("%s", line)
    proc.wait()


def read_metrics(run_dir: Path) -> dict[str, Any]:
    """`<run_dir>/analysis/metrics.json`."""
    path = Path(run_dir) / ANALYSIS_DIR / "metrics.json"
    if not path.exists():
        raise AnalysisError(f"{path}: the analysis job finished but wrote no metrics")
    return json.loads(path.read_text())


def analyze_locations(locations: Sequence[Path | str], master: str = DEFAULT_MASTER, spark_submit: str | None = None,
                      extra_conf: Mapping[str, Any] | None = None, parallel: int | None = None,
                      quiet: bool = False) -> None:
    """Run the job on run directories given as local paths or URIs of any Hadoop filesystem the
    Spark application reaches (`hdfs://`, `s3a://`, ...); each gets its `analysis/` there.

    Nothing is checked or read on this host: the locations need not be visible here.
    AnalysisError when the job fails.
    """
    app_args = ["--parallel", str(parallel)] if parallel else []
    conf = {**size_conf(locations), **(extra_conf or {})}
    _run(spark_submit_argv(list(locations), master, spark_submit, conf, app_args), quiet, master)


def analyze_many(run_dirs: Sequence[Path], master: str = DEFAULT_MASTER, spark_submit: str | None = None,
                 extra_conf: Mapping[str, Any] | None = None, parallel: int | None = None,
                 quiet: bool = False) -> dict[Path, dict[str, Any]]:
    """Analyse several run directories with one spark-submit (one JVM start); returns metrics per run."""
    run_dirs = [Path(d) for d in run_dirs]
    for d in run_dirs:
        if not (d / "manifest.json").exists():
            raise LedgerError(f"{d}/manifest.json: no manifest; {d} is not a kafkaproof run directory")
    analyze_locations(run_dirs, master, spark_submit, extra_conf, parallel, quiet)
    return {d: read_metrics(d) for d in run_dirs}


def analyze(run_dir: Path, master: str = DEFAULT_MASTER, spark_submit: str | None = None,
            extra_conf: dict | None = None, quiet: bool = False) -> dict:
    """Run the analysis job on one run directory; returns its metrics.json as a dict.

    Raises AnalysisError (with the tail of spark-submit's output) when the job fails,
    LedgerError when `run_dir` is not a run directory.
    """
    return analyze_many([Path(run_dir)], master, spark_submit, extra_conf, quiet=quiet)[Path(run_dir)]

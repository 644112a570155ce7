"""The Java (kafka-clients) workload driver: build it, find a client version's jars, launch it, read its streams.

The driver (`java/`, main class `io.kafkaproof.driver.Main`) is built once per source hash with
Maven into `$KAFKAPROOF_CACHE/java-driver/<hash>/kafkaproof-driver.jar`. It is compiled against
kafka-clients 3.9.2 (`provided`) and runs on the kafka-clients jars of the version a scenario
asks for (3.7-4.x): those of an installed Kafka distribution (`$KAFKAPROOF_CACHE/kafka/<v>/libs`)
when there is one, else `org.apache.kafka:kafka-clients:<v>` resolved from Maven Central into
`$KAFKAPROOF_CACHE/kafka-clients/<v>/` with slf4j-simple as the logging binding.

Its streams are tab-separated text (see docs/java-client.md): `read_tsv` turns one into an
Arrow table, dropping an unterminated last line (a driver killed mid-write).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..cluster import install
from ..errors import InstallError, KafkaproofError
from ..paths import cache_dir, file_lock, share_dir, write_text_atomic
from ..spec import ledger
from ..spec.versions import DEFAULT_KAFKA_VERSION, check_version
from .maven import run_maven as _run_maven
from .maven import tree_hash

log = logging.getLogger(__name__)

MAIN_CLASS = "io.kafkaproof.driver.Main"
JAR_NAME = "kafkaproof-driver.jar"
ROLES = ("producer", "consumer")
WORKER_ROLES = ROLES + ("share",)  # share: a KIP-932 share consumer in a consumer's place (run/share_run.py)
HEAP = "256m"
# Host with 2 cores shared with the brokers: one GC thread, no concurrent GC work.
JVM_OPTS = ("-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-XX:-UsePerfData", "-Djava.awt.headless=true")

# The driver's streams (docs/java-client.md). Reads and events share the ledger's schemas.
SENDS_TSV = pa.schema([("value_id", pa.int64()), ("producer", pa.int32()), ("producer_pid", pa.int32()),
                       ("seq", pa.int64()), ("key", pa.string()), ("intended_ns", pa.int64()),
                       ("send_ns", pa.int64()), ("txn_id", pa.int64())])
COMPLETIONS_TSV = pa.schema([("value_id", pa.int64()), ("complete_ns", pa.int64()), ("partition", pa.int32()),
                             ("offset", pa.int64()), ("error_code", pa.int32()), ("error_name", pa.string()),
                             ("outcome", pa.string()), ("error_message", pa.string())])
TXNS_TSV = pa.schema([("producer", pa.int32()), ("txn_id", pa.int64()), ("txn_outcome", pa.string())])
READS_TSV = ledger.READS
EVENTS_TSV = ledger.CONSUMER_EVENTS

# Jars kafka-clients needs at run time (its pom's runtime dependencies, the same for 3.7-4.3),
# and the SLF4J bindings a Kafka distribution ships (4.x: Log4j2, 3.x: reload4j).
_CLIENT_RUNTIME = ("zstd-jni-", "lz4-java-", "snappy-java-", "slf4j-api-")
_DIST_LOGGING = ("log4j-api-", "log4j-core-", "log4j-slf4j-impl-", "log4j-slf4j2-impl-", "slf4j-reload4j-",
                 "reload4j-")

_LOG4J2_STDERR = """status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d{yyyy-MM-dd'T'HH:mm:ss.SSS}] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""
_LOG4J1_STDERR = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d{yyyy-MM-dd'T'HH:mm:ss.SSS}] %p %m (%c)%n
"""

_CLIENTS_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkaproof</groupId>
  <artifactId>kafka-clients-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>{version}</version></dependency>
{extra}
  </dependencies>
</project>
"""


class JavaDriverError(KafkaproofError):
    """The Java driver could not be built, run or read."""


def java_dir() -> Path:
    """The driver's Maven project: `java/` of the checkout or of the installed package (read only)."""
    path = share_dir("java")
    if not (path / "pom.xml").is_file():
        raise InstallError(f"{path}/pom.xml not found: the Java driver's Maven project is incomplete")
    return path


def source_hash(root: Path | None = None) -> str:
    """Pure over the files: a hash of `java/pom.xml` and every file under `java/src/` (names and contents)."""
    root = root or java_dir()
    return tree_hash(root, [root / "pom.xml", *sorted(p for p in (root / "src").rglob("*") if p.is_file())])


def driver_dir() -> Path:
    return cache_dir() / "java-driver"


def build(force: bool = False) -> Path:
    """Build the driver jar (JUnit tests included) unless this source hash is built; returns the jar's path.

    Idempotent and safe to call from several processes at once. Nothing is written under `java/`:
    Maven's build directory is in the cache.
    """
    digest = source_hash()
    home = driver_dir() / digest
    jar = home / JAR_NAME
    if jar.exists() and not force:
        return jar
    with file_lock(driver_dir() / ".lock"):
        if jar.exists() and not force:
            return jar
        log.info("building the Java driver (sources %s) into %s", digest, home)
        home.mkdir(parents=True, exist_ok=True)
        build_dir = Path(tempfile.mkdtemp(prefix="build-", dir=home))
        try:
            _run_maven(["package", f"-Dkp.build.dir={build_dir}"], java_dir(), "building the Java driver")
            built = build_dir / JAR_NAME
            if not built.exists():
                raise InstallError(f"Maven succeeded but wrote no {built}")
            tmp = home / (JAR_NAME + ".tmp")
            shutil.copyfile(built, tmp)
            os.replace(tmp, jar)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
        log.info("Java driver built: %s", jar)
    return jar


def _pick(libs: Path, version: str) -> list[Path] | None:
    """kafka-clients and its runtime jars (+ the distribution's logging binding) from a Kafka `libs/`."""
    clients = libs / f"kafka-clients-{version}.jar"
    if not clients.exists():
        return None
    jars = sorted(libs.glob("*.jar"))
    picked = [clients]
    for prefix in _CLIENT_RUNTIME + _DIST_LOGGING:
        picked += [j for j in jars if j.name.startswith(prefix) and re.match(r"\d", j.name[len(prefix):])]
    if not any(j.name.startswith("slf4j-api-") for j in picked):
        return None
    return picked


def _resolve_clients(version: str, dest: Path) -> None:
    """Resolve kafka-clients `version` + runtime deps + slf4j-simple (matching slf4j-api) into `dest`."""
    with tempfile.TemporaryDirectory(prefix="kafkaproof-clients-") as tmp:
        staging = Path(tmp) / "libs"
        pom = Path(tmp) / "pom.xml"
        args = ["dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        pom.write_text(_CLIENTS_POM.format(version=version, extra=""))
        _run_maven(args, Path(tmp), f"resolving kafka-clients {version} from Maven Central")
        api = [p.name for p in staging.glob("slf4j-api-*.jar")]
        m = re.match(r"slf4j-api-(.+)\.jar$", api[0]) if api else None
        if m:  # a binding of the same SLF4J line, so client logs reach stderr
            extra = (f"    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId>"
                     f"<version>{m.group(1)}</version></dependency>")
            pom.write_text(_CLIENTS_POM.format(version=version, extra=extra))
            _run_maven(args, Path(tmp), f"resolving slf4j-simple {m.group(1)}")
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), dest)


def client_classpath(version: str) -> list[Path]:
    """The kafka-clients jars of `version` (+ runtime deps and an SLF4J binding), installing them if needed."""
    check_version(version)
    home = os.environ.get("KAFKA_HOME")
    candidates = [install.maven_libs_dir(version)]
    if home:
        candidates.insert(0, Path(home) / "libs")
    for libs in candidates:
        if libs.is_dir():
            picked = _pick(libs, version)
            if picked:
                return picked
    dest = cache_dir() / "kafka-clients" / version
    done = dest / ".complete"
    if not done.exists():
        with file_lock(cache_dir() / "kafka-clients" / f".{version}.lock"):
            if not done.exists():
                log.info("resolving kafka-clients %s from Maven Central into %s", version, dest)
                _resolve_clients(version, dest)
                done.write_text(version + "\n")
    jars = sorted(dest.glob("*.jar"))
    if not any(j.name == f"kafka-clients-{version}.jar" for j in jars):
        raise InstallError(f"{dest} has no kafka-clients-{version}.jar: remove the directory and try again")
    return jars


def _logging_flags() -> list[str]:
    """System properties sending client logs to stderr at WARN, whichever SLF4J binding is on the classpath."""
    d = driver_dir() / "logging"
    files = {"log4j2-stderr.properties": _LOG4J2_STDERR, "log4j-stderr.properties": _LOG4J1_STDERR}
    for name, text in files.items():
        path = d / name
        if not path.exists() or path.read_text() != text:
            write_text_atomic(path, text)
    return [f"-Dlog4j2.configurationFile={d / 'log4j2-stderr.properties'}",
            f"-Dlog4j.configuration=file:{d / 'log4j-stderr.properties'}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS"]


def _java_command(args: list[str], client_version: str) -> list[str]:
    classpath = [build(), *client_classpath(client_version)]
    return [install.java_binary(), f"-Xmx{HEAP}", "-Xms64m", *JVM_OPTS, *_logging_flags(),
            "-cp", os.pathsep.join(str(p) for p in classpath), MAIN_CLASS, *args]


def command(role: str, spec_path: Path, client_version: str) -> list[str]:
    """The command line running a `producer`, `consumer` or `share` consumer with the worker spec at `spec_path`."""
    if role not in WORKER_ROLES:
        raise JavaDriverError(f"unknown worker role {role!r}; allowed: {', '.join(WORKER_ROLES)}")
    return _java_command([role, str(spec_path)], client_version)


def _role(role: str) -> str:
    r = role[:-1] if role in ("producers", "consumers") else role
    if r not in ROLES:
        raise JavaDriverError(f"unknown client role {role!r}; allowed: producer, consumer")
    return r


@functools.lru_cache(maxsize=None)
def _config_names(role: str, client_version: str) -> frozenset[str]:
    path = driver_dir() / "config-names" / f"{client_version}.json"
    try:
        cached = json.loads(path.read_text())
        return frozenset(cached[role])
    except (OSError, ValueError, KeyError):
        pass
    names: dict[str, list[str]] = {}
    for r in ROLES:
        proc = subprocess.run(_java_command(["config-names", r], client_version), capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise JavaDriverError(f"listing kafka-clients {client_version} {r} config names failed: "
                                  f"{proc.stderr.strip()[-500:]}")
        names[r] = sorted(line.strip() for line in proc.stdout.splitlines() if line.strip())
    write_text_atomic(path, json.dumps(names, indent=1))
    return frozenset(names[role])


def config_names(role: str, client_version: str) -> frozenset[str]:
    """`ProducerConfig.configNames()` / `ConsumerConfig.configNames()` of a kafka-clients version (cached)."""
    return _config_names(_role(role), check_version(client_version))


def check_config(role: str, spec: dict, client_version: str) -> str | None:
    """What kafka-clients refuses when a worker of `spec` builds its client (None: nothing). The client is
    built and closed without connecting (`Main check-config`), so this runs before any cluster starts."""
    with tempfile.NamedTemporaryFile("w", suffix=".spec.json", delete=False) as f:
        json.dump({"bootstrap": "127.0.0.1:9", "run_id": "config-check", **spec}, f)
    try:
        proc = subprocess.run(_java_command(["check-config", _role(role), f.name], check_version(client_version)),
                              capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)
    if proc.returncode == 0:
        return None
    if proc.returncode == 1 and proc.stdout.strip():
        return proc.stdout.strip().splitlines()[-1]
    raise JavaDriverError(f"checking a kafka-clients {client_version} {role} config failed: {proc.stderr.strip()[-500:]}")


def classify(exception_class: str, message: str | None = None, client_version: str = DEFAULT_KAFKA_VERSION,
             in_send: bool = False, retries: int | None = None) -> str:
    """The outcome (ok/fail/indefinite) the driver gives an exception (runs `Main classify`; for tests and docs)."""
    args = ["classify", exception_class] + ([message] if message is not None else [])
    args += ["--in-send"] if in_send else []
    args += ["--retries", str(retries)] if retries is not None else []
    proc = subprocess.run(_java_command(args, client_version), capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise JavaDriverError(f"classify {exception_class} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def read_tsv(path: Path, schema: pa.Schema) -> pa.Table:
    """Read one of the driver's streams as `schema`; crash-safe (an unterminated last line is dropped).

    `\\N` is null; list columns are comma-joined (an empty field is an empty list); booleans are
    `true`/`false`. A missing or empty file gives an empty table.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return schema.empty_table()
    end = data.rfind(b"\n")
    if end < 0:
        return schema.empty_table()
    lists = {f.name for f in schema if pa.types.is_list(f.type)}
    types = {f.name: pa.string() if f.name in lists else f.type for f in schema}
    try:
        table = pacsv.read_csv(
            pa.BufferReader(data[:end + 1]),
            read_options=pacsv.ReadOptions(column_names=schema.names),
            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False, escape_char=False,
                                             double_quote=False, newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(column_types=types, null_values=["\\N"], strings_can_be_null=True,
                                                 true_values=["true"], false_values=["false"]))
    except pa.ArrowInvalid as e:
        raise JavaDriverError(f"{path}: not a driver stream of {len(schema)} columns ({', '.join(schema.names)}): "
                              f"{e}") from e
    for name in lists:
        text = table[name]
        split = pc.split_pattern(text, ",")
        empty = pa.scalar([], type=split.type)
        col = pc.if_else(pc.equal(text, ""), empty, split).cast(schema.field(name).type)
        table = table.set_column(schema.get_field_index(name), schema.field(name), col)
    return table.select(schema.names).cast(schema)

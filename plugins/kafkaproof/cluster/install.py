"""Find or install an Apache Kafka distribution (broker + tools classpath).

Kafka is not in PyPI or Debian. We resolve `org.apache.kafka:kafka_2.13` and
`kafka-tools` plus a logging binding from Maven Central with
`mvn dependency:copy-dependencies` into `<cache>/kafka/<version>/libs`, or use
`$KAFKA_HOME/libs` of an official distribution.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import InstallError
from ..paths import cache_dir, file_lock
from ..spec.versions import DEFAULT_KAFKA_VERSION, check_version

log = logging.getLogger(__name__)


LOG4J2_VERSION = "2.24.3"
RELOAD4J_VERSION = "1.2.25"
SLF4J1_VERSION = "1.7.36"

_POM_TEMPLATE = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkaproof</groupId>
  <artifactId>kafka-distribution</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{version}</version></dependency>
{logging}
  </dependencies>
</project>
"""

_LOG4J2_DEPS = f"""    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{LOG4J2_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J2_VERSION}</version></dependency>"""

_RELOAD4J_DEPS = f"""    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>{SLF4J1_VERSION}</version></dependency>
    <dependency><groupId>ch.qos.reload4j</groupId><artifactId>reload4j</artifactId><version>{RELOAD4J_VERSION}</version></dependency>"""

_LOG4J2_CONFIG = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{ISO8601}] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""

_LOG4J1_CONFIG = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.reflections=ERROR
"""


@dataclass(frozen=True)
class KafkaDistribution:
    """An installed Kafka: its version and the directory of jars to run it from."""

    version: str
    libs: Path
    source: str  # "maven" or "KAFKA_HOME"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def uses_log4j2(self) -> bool:
        """Kafka 4.x logs with Log4j2; 3.x with reload4j (log4j 1 API)."""
        return self.major >= 4

    def classpath(self) -> str:
        return f"{self.libs}/*"

    def log_config(self) -> Path:
        """Path of a logging config (to stdout) suited to this version, written on first use."""
        name = "log4j2.properties" if self.uses_log4j2 else "log4j.properties"
        path = cache_dir() / "kafka" / "logging" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_LOG4J2_CONFIG if self.uses_log4j2 else _LOG4J1_CONFIG)
        return path

    def java_command(self, main_class: str, *args: str, heap: str = "256m", jvm_opts: tuple[str, ...] = ()) -> list[str]:
        """Command line running `main_class` of this distribution with our logging config."""
        log_flag = (f"-Dlog4j2.configurationFile={self.log_config()}" if self.uses_log4j2
                    else f"-Dlog4j.configuration=file:{self.log_config()}")
        return [java_binary(), f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", log_flag, *jvm_opts,
                "-cp", self.classpath(), main_class, *args]


def java_binary() -> str:
    """The `java` to run Kafka with: `$JAVA_HOME/bin/java` or the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise InstallError("no `java` found: install OpenJDK 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    return found


def _version_from_libs(libs: Path) -> str | None:
    for jar in libs.glob("kafka_2.13-*.jar"):
        m = re.match(r"kafka_2\.13-(\d+\.\d+\.\d+)\.jar$", jar.name)
        if m:
            return m.group(1)
    return None


def _from_kafka_home(home: Path, wanted: str | None) -> KafkaDistribution:
    libs = home / "libs"
    version = _version_from_libs(libs) if libs.is_dir() else None
    if version is None:
        raise InstallError(f"KAFKA_HOME={home} is not a Kafka distribution (no libs/kafka_2.13-<version>.jar)")
    if wanted and wanted != version:
        raise InstallError(f"KAFKA_HOME={home} holds Kafka {version}, but {wanted} was asked for: "
                           f"unset KAFKA_HOME to install {wanted} from Maven Central")
    return KafkaDistribution(version=version, libs=libs, source="KAFKA_HOME")


def maven_libs_dir(version: str) -> Path:
    return cache_dir() / "kafka" / version / "libs"


def ensure_kafka(version: str | None = None) -> KafkaDistribution:
    """Return an installed Kafka distribution, installing `version` from Maven Central if needed.

    `$KAFKA_HOME` wins when set. Installs are idempotent and safe to run concurrently.
    """
    home = os.environ.get("KAFKA_HOME")
    if home:
        return _from_kafka_home(Path(home), version)
    version = check_version(version or DEFAULT_KAFKA_VERSION)
    libs = maven_libs_dir(version)
    done = libs.parent / ".complete"
    if done.exists():
        return KafkaDistribution(version=version, libs=libs, source="maven")
    with file_lock(libs.parent / ".lock"):
        if not done.exists():
            _maven_install(version, libs)
            done.write_text(version + "\n")
    return KafkaDistribution(version=version, libs=libs, source="maven")


def _maven_install(version: str, libs: Path) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise InstallError("Maven (`mvn`) is needed to install Kafka from Maven Central: apt-get install maven, "
                           "or point KAFKA_HOME at a Kafka distribution")
    major = int(version.split(".")[0])
    pom = _POM_TEMPLATE.format(version=version, logging=_LOG4J2_DEPS if major >= 4 else _RELOAD4J_DEPS)
    log.info("installing Kafka %s from Maven Central into %s", version, libs)
    with tempfile.TemporaryDirectory(prefix="kafkaproof-pom-") as tmp:
        (Path(tmp) / "pom.xml").write_text(pom)
        staging = Path(tmp) / "libs"
        proc = subprocess.run(
            [mvn, "-B", "-q", "dependency:copy-dependencies", f"-DoutputDirectory={staging}"],
            cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise InstallError(f"could not resolve Kafka {version} from Maven Central "
                               f"(is it a released version with all its artifacts?):\n{tail}")
        if libs.exists():
            shutil.rmtree(libs)
        shutil.move(str(staging), libs)
    log.info("Kafka %s installed (%d jars)", version, len(list(libs.glob("*.jar"))))

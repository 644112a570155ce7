"""Measure which client library and exact version each producer and consumer of a run runs on.

The Python driver runs in this interpreter's environment: confluent-kafka's and librdkafka's
versions are this process's. The Java driver runs on the kafka-clients jar `java_driver.client_classpath`
picks; its version is read from inside that jar (`kafka/kafka-version.properties`, what kafka-clients'
own `AppInfoParser` reports), without starting a JVM; the jar's file name when the jar has none.
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..spec.client_versions import ClientVersion, ProcessClient, ROLES, requested_java_version
from ..spec.clients import effective_clients

_CLIENTS_JAR = re.compile(r"kafka-clients-(\d[^/]*)\.jar$")
_VERSION_FILE = "kafka/kafka-version.properties"


def _first(v: Any) -> str:
    """confluent-kafka's `version()`/`libversion()`: a (text, int) pair in most releases, the text alone in some
    (2.16's `version()`), where `[0]` gave its first character."""
    return str(v[0] if isinstance(v, tuple) else v)


def python_client_versions(module: Any = None) -> tuple[ClientVersion, ...]:
    """confluent-kafka and the librdkafka it is linked with, as this interpreter (the Python driver's) has them."""
    if module is None:
        import confluent_kafka as module
    return (ClientVersion("confluent-kafka", getattr(module, "__version__", None) or _first(module.version())),
            ClientVersion("librdkafka", _first(module.libversion())))


def jar_version(jar: Path) -> str | None:
    """The kafka-clients version of `jar`: its `kafka/kafka-version.properties` `version`, else the file name's."""
    try:
        with zipfile.ZipFile(jar) as z:
            for line in z.read(_VERSION_FILE).decode("utf-8", "replace").splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() == "version" and value.strip():
                    return value.strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        pass
    m = _CLIENTS_JAR.search(Path(jar).name)
    return m.group(1) if m else None


def java_client_versions(classpath: Sequence[Path]) -> tuple[ClientVersion, ...]:
    """The kafka-clients jar of a Java driver classpath, with its version (None when there is no such jar)."""
    jars = [Path(p) for p in classpath if _CLIENTS_JAR.search(Path(p).name)]
    return (ClientVersion("kafka-clients", jar_version(jars[0]) if jars else None),)


def client_versions(scenario: Mapping[str, Any],
                    java_classpath: Callable[[str], Sequence[Path]] | None = None,
                    python: Callable[[], tuple[ClientVersion, ...]] = python_client_versions) -> list[ProcessClient]:
    """Every producer and consumer of the resolved `scenario` with the libraries it runs on.

    `java_classpath(version)` gives the Java driver's client jars (default `java_driver.client_classpath`,
    which installs them when missing, as starting the worker would)."""
    if java_classpath is None:
        from .java_driver import client_classpath as java_classpath
    clients = effective_clients(scenario)
    cache: dict[str, tuple[ClientVersion, ...]] = {}

    def libraries(client: str, role: str) -> tuple[ClientVersion, ...]:
        key = f"java:{requested_java_version(scenario, role)}" if client == "java" else client
        if key not in cache:
            cache[key] = (java_client_versions(java_classpath(requested_java_version(scenario, role)))
                          if client == "java" else python())
        return cache[key]

    return [ProcessClient(role, int(e["index"]), e["client"], libraries(e["client"], role))
            for role in ROLES for e in clients[role]]

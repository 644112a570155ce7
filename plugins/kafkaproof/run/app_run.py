"""The application side of a scenario run (issue 39): its services, the HTTP drive, what it processed.

`ScenarioRun` uses `AppRun` instead of kafkaproof's producer workers when the scenario has an
`application` section: it starts the services (`run/services.py`) once the cluster and topic are
ready, drives one HTTP request per event in a thread (`run/http_driver.py`), polls the processed
source if the scenario names one (`run/processed.py`), and turns all of it into ledger tables
(`run/app_ledger.py`): sends from the requests, reads from the processed source, the audit drained
by identity. Everything it started is stopped by `stop` (also after an error).

`{example_app:<service>}` in a service's command is the path of the example application's jar
(`run/example_app.py`, built once per source hash): catalog scenarios run the example without a
Maven build of their own.
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow as pa

from ..errors import ApplicationError
from ..spec.application import ACCEPTED, REJECTED, ApplicationSection, event_seq, fill_placeholders
from ..spec.ledger import READS, make_value_id
from . import example_app
from .app_ledger import EventDecoder, event_index, not_applicable, sends_from_http, value_id_of
from .delivered import NOT_MEASURED_NO_PROXY, NOT_READ, DeliveryRecorder, measure, not_measured
from .drain import drain
from .http_driver import drive
from .processed import ProcessedPoller, http_fetch, postgres_fetch, reads_from_topic
from .services import ServiceFleet, ServiceSpec

log = logging.getLogger(__name__)

EXAMPLE_APP = re.compile(r"\{example_app:([a-z0-9-]+)\}")
PRODUCER = 0  # the ledger producer of every request (value id = make_value_id(0, seq))


def resolve_example_app(argv: tuple[str, ...] | list[str],
                        build: Callable[[], Mapping[str, Path]] = example_app.build) -> list[str]:
    """`argv` with each `{example_app:<service>}` replaced by that service's built jar (building the
    example once when some argument asks for it); ApplicationError naming the services it has otherwise."""
    if not any(EXAMPLE_APP.search(a) for a in argv):
        return list(argv)
    jars = build()

    def jar(m: re.Match) -> str:
        if m.group(1) not in jars:
            raise ApplicationError(f"{m.group(0)}: the example application has no service {m.group(1)!r}; "
                                   f"it has {', '.join(sorted(jars))}")
        return str(jars[m.group(1)])
    return [EXAMPLE_APP.sub(jar, a) for a in argv]


def service_specs(section: ApplicationSection,
                  build: Callable[[], Mapping[str, Path]] = example_app.build) -> list[ServiceSpec]:
    """The fleet's specs of the scenario's services (example-app jars resolved)."""
    return [ServiceSpec(s.name, resolve_example_app(s.argv, build), s.cwd, dict(s.env), s.instances,
                        s.ready_url, s.ready_log, s.ready_timeout_s) for s in section.services]


def rejected_before(sends: pa.Table, until_ns: int | None) -> tuple[int, str | None] | None:
    """Pure: when every request intended before `until_ns` (the first fault's injection; None: all of
    them) was rejected, (how many, the first one's error); else None. Such a run measured a broken
    request, not a fault: the run is an error, not a verdict."""
    intended = sends.column("intended_ns").to_pylist()
    outcomes = sends.column("outcome").to_pylist()
    before = [i for i, t in enumerate(intended) if until_ns is None or t < until_ns]
    if not before or any(outcomes[i] != REJECTED for i in before):
        return None
    first = before[0]
    status = sends.column("status")[first].as_py()
    why = sends.column("error_message")[first].as_py() or sends.column("failure")[first].as_py() or ""
    if status is None:
        return len(before), why
    return len(before), f"HTTP {status}: {why}" if why else f"HTTP {status}"


def identity_error(counts: Mapping[str, Any], where: str, identity: str) -> str | None:
    """Pure: an error when the drain read records but the identity matched none of them (a wrong
    identity: every event would look lost), with an example record; None otherwise."""
    if counts["matched"] or not (counts["unreadable"] or counts["foreign"]):
        return None
    examples = counts["examples"]["unreadable"] or counts["examples"]["foreign"]
    return (f"{where}: {identity} matched none of the {counts['unreadable'] + counts['foreign']:,} records "
            f"in the topic ({counts['unreadable']:,} unreadable, {counts['foreign']:,} with an id that is not "
            f"one of the run's events); e.g. {examples[0] if examples else '?'}")


class AppRun:
    """One run's application: start, drive, poll, drain by identity, stop. See the module docstring."""

    def __init__(self, section: ApplicationSection, run_dir: Path, run_id: str, where: str,
                 cluster: str | None = None, clock_offset_ns: int = 0, fleet: Any = None) -> None:
        """`fleet`: the services' fleet when they are not processes (`run.app_containers.ContainerFleet`);
        by default a `ServiceFleet` of the section's commands."""
        self.section, self.run_dir, self.run_id, self.where = section, run_dir, run_id, where
        self.clock_offset_ns = clock_offset_ns
        self.fleet = fleet if fleet is not None else ServiceFleet(service_specs(section), run_dir,
                                                                   f"{run_id}-services", cluster=cluster)
        self.placeholders: dict[str, str] = {}
        self.stop_drive = threading.Event()
        self._drive_thread: threading.Thread | None = None
        self._http: pa.Table | None = None
        self._drive_error: BaseException | None = None
        self.poller: ProcessedPoller | None = None
        self.decoders: dict[str, EventDecoder] = {}
        self.processed_reads: pa.Table | None = None
        # Filled in place by `index_events` once the drive is done: the processed decoder holds it.
        self.index: dict[str, int] = {}
        self.processed_decoder = _processed_decoder(section, run_id, self.index)
        self._digests: dict[str, str] = {}  # file_digests by path, for the manifest
        self.started_ns: int | None = None
        # What the fault proxies handed the consumers (`run/delivered.py`): the recorder with proxies, and
        # the manifest's `application.delivered` (not measured until it is).
        self.deliveries: DeliveryRecorder | None = None
        self.delivered: dict[str, Any] = not_measured(NOT_MEASURED_NO_PROXY)

    # --- services
    def start(self, placeholders: Mapping[str, str]) -> None:
        """Start every service and wait until each is ready (ApplicationError naming the one that is not)."""
        self.placeholders = {k: str(v) for k, v in placeholders.items()}
        self.fleet.start(self.placeholders)

    def record_deliveries(self, cluster: Any, topic: str, topic_id: str | None = None) -> None:
        """With fault proxies in front of the brokers: turn their delivery logs on (before the services start,
        so the consumers' first fetches are seen). Without: the measure stays "not measured (no proxy)"."""
        if cluster is None or not cluster.has_proxy:
            return
        self.deliveries = DeliveryRecorder(cluster, topic, topic_id)
        self.deliveries.start()
        self.delivered = not_measured(NOT_READ)

    def measure_deliveries(self, sends: pa.Table, reads: pa.Table | None, audit_value_ids: set[int]) -> None:
        """Once the services are stopped: read the proxies' logs, write `delivered.parquet` and compare the
        events accepted, delivered and processed (`run/delivered.py`); a failure leaves the measure "not
        measured" with its reason, never fails the run."""
        if self.deliveries is None:
            return
        try:
            decoder = EventDecoder(self.section.identity, self.index)
            self.delivered = measure(self.run_dir, self.deliveries, decoder, sends,
                                     reads if self.section.processed is not None else None, audit_value_ids,
                                     self.index)
        except Exception as e:  # noqa: BLE001 - a passive measure: the run's verdict does not depend on it
            log.exception("the delivery logs could not be measured")
            self.delivered = not_measured(f"not measured (reading the proxies' delivery logs failed: {e})")

    @property
    def fault_fleet(self) -> "PollingFleet":
        """The fleet as the fault timeline gets it: an app fault that ends an instance polls first (`PollingFleet`)."""
        return PollingFleet(self)

    def poll_before_end(self, service: str) -> None:
        """Poll the processed source once more when it is an HTTP list `service` may serve (its own, or
        one naming no service): a list kept in memory goes with the process, so what this life processed
        is seen now, not up to `poll_s` earlier."""
        processed = self.section.processed
        if self.poller is not None and processed.source == "http" and processed.service in (None, service):
            self.poller.poll()

    def port(self, service: str) -> str:
        return str(self.fleet.instances[(service, 0)].port)

    def stop(self) -> None:
        """Stop the drive, the poller and every service; safe to call more than once."""
        self.stop_drive.set()
        if self._drive_thread is not None:
            self._drive_thread.join(60)
        if self.poller is not None and self.processed_reads is None:
            self.poller.stop(final=False)
        self.fleet.stop_all()

    # --- drive
    def _drive(self) -> None:
        d = self.section.drive
        template = d.request.fill({"port": self.port(d.service)}) if d.service else d.request
        try:
            self._http = drive(template, self.placeholders, d.rate, messages=d.messages, duration_s=d.duration_s,
                               timeout_s=d.timeout_s, stop=self.stop_drive)
        except BaseException as e:  # raised in the run's thread by `http_sends`
            self._drive_error = e

    def start_drive(self) -> None:
        """Send the requests in a thread of their own; the poller (if any) starts with it."""
        self.started_ns = time.monotonic_ns()
        processed = self.section.processed
        if processed is not None and processed.source in ("http", "postgres"):
            if processed.source == "http":
                ports = {"port": self.port(processed.service)} if processed.service else {}
                fetch = http_fetch(fill_placeholders(processed.url, {**self.placeholders, **ports}), processed.pointer,
                                   records=processed.records, topic=self.placeholders["topic"])
            else:
                fetch = postgres_fetch(processed.dsn, processed.query)
            self.poller = ProcessedPoller(fetch, self.processed_decoder, processed.poll_s, mode=processed.mode,
                                          clock_offset_ns=self.clock_offset_ns).start()
        self._drive_thread = threading.Thread(target=self._drive, name="kp-http-drive", daemon=True)
        self._drive_thread.start()

    def drive_done(self) -> bool:
        return self._drive_thread is not None and not self._drive_thread.is_alive()

    def http_sends(self) -> pa.Table:
        """The driver's `HTTP_SENDS` table once it is done; the driver's own failure re-raised."""
        if self._drive_error is not None:
            raise ApplicationError(f"the HTTP drive failed: {type(self._drive_error).__name__}: "
                                   f"{self._drive_error}") from self._drive_error
        if self._http is None:
            raise ApplicationError("the HTTP drive did not finish")
        return self._http

    def check_requests(self, first_fault_ns: int | None) -> None:
        """ApplicationError when every request before the first fault was rejected: the requests were
        wrong (URL, body, headers), and no fault was tested."""
        found = rejected_before(self.http_sends(), first_fault_ns)
        if found is not None:
            n, why = found
            when = " before the first fault" if first_fault_ns is not None else ""
            raise ApplicationError(f"{self.where}.drive.request: the application rejected all {n:,} requests "
                                   f"sent{when}; the first: {why} (check the request's URL, method, headers "
                                   f"and body)")

    # --- after the drive
    def settle(self, settle_s: float, deadline: float) -> None:
        """Let the consumer side finish: poll until the processed rows stop growing for `settle_s`."""
        if self.poller is None:
            return
        rows, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            self.poller.poll()
            n = self.poller.table().num_rows
            if n != rows:
                rows, since = n, time.monotonic()
            elif time.monotonic() - since >= settle_s:
                break
            time.sleep(max(0.2, self.section.processed.poll_s))
        self.poller.stop(final=True)
        self.processed_reads = self.poller.table()

    def index_events(self) -> None:
        """The run's event index from the requests sent (in place: the processed decoder reads it)."""
        self.index.clear()
        self.index.update(event_index(self.http_sends(), PRODUCER))

    def drain_audit(self, bootstrap: str, topic: str, timeout_s: float,
                    connection: Mapping[str, Any] | None) -> tuple[list[dict], dict[str, dict]]:
        """The final drain of both isolations by identity; ApplicationError when the identity matched
        none of the records."""
        rows: list[dict] = []
        marks: dict[str, dict] = {}
        for iso in ("read_uncommitted", "read_committed"):
            decoder = value_id_of(self.section.identity, self.index)
            got, m = drain(bootstrap, topic, iso, timeout_s, connection, decoder=decoder)
            self.decoders[iso] = decoder
            rows += got
            marks[iso] = {str(p): v for p, v in m.items()}
        error = identity_error(self.decoders["read_uncommitted"].counts.as_dict(), f"{self.where}.identity",
                               _describe_identity(self.section))
        if error:
            raise ApplicationError(error)
        return rows, marks

    def reads(self, bootstrap: str, timeout_s: float, connection: Mapping[str, Any] | None) -> pa.Table:
        """What the consumer side processed as READS rows (empty without a processed source)."""
        processed = self.section.processed
        if processed is None:
            return READS.empty_table()
        if processed.source == "topic":
            table, _ = reads_from_topic(bootstrap, processed.topic, self.processed_decoder, timeout_s,
                                        connection, self.clock_offset_ns)
            return table
        return self.processed_reads if self.processed_reads is not None else READS.empty_table()

    def sends(self) -> pa.Table:
        return sends_from_http(self.http_sends(), PRODUCER, clock_offset_ns=self.clock_offset_ns)

    def clients(self) -> dict[str, list[dict[str, Any]]]:
        """The manifest's `clients`: no kafkaproof producer or consumer; the processed source is the one
        consumer the analysis judges delivery against (none without a source: nothing to judge there)."""
        consumers = [{"index": 0, "group": "application", "isolation_level": None,
                      "client": "application"}] if self.section.processed is not None else []
        return {"producers": [], "consumers": consumers}

    def manifest(self) -> dict[str, Any]:
        """The manifest's `application`: services and their argv, how identity and processing were read,
        what the drain could not match, and the checks that do not apply, each with its reason."""
        processed = self.section.processed
        out: dict[str, Any] = {
            "services": [{"name": name, "instance": i, "port": inst.port, "argv": inst.argv,
                          "files": file_digests(inst.argv, self._digests),
                          "log": str(inst.log_path.relative_to(self.run_dir))}
                         for (name, i), inst in self.fleet.instances.items()],
            "drive": {"service": self.section.drive.service or None, "rate": self.section.drive.rate,
                      "messages": self.section.drive.messages, "duration_s": self.section.drive.duration_s},
            "identity": _describe_identity(self.section),
            "processed": None if processed is None else {"source": processed.source, **(
                {"url": processed.url, "poll_s": processed.poll_s, "mode": processed.mode,
                 "records": processed.records.as_dict() if processed.records else None}
                if processed.source == "http" else
                {"topic": processed.topic} if processed.source == "topic" else {"query": processed.query})},
            "decode": {iso: d.counts.as_dict() for iso, d in self.decoders.items()},
            "delivered": self.delivered,
            "not_applicable": not_applicable(processed.source if processed else None,
                                             read_offsets=processed is not None and processed.read_offsets),
        }
        if processed is not None and processed.read_offsets and self.processed_reads is not None:
            # Reads without a position (another topic, no id, no usable offset) are out of the offset checks.
            placed = self.processed_reads.column("offset").drop_null()
            out["processed_positions"] = {"with": len(placed), "without": self.processed_reads.num_rows - len(placed)}
        if self.processed_decoder is not None:
            out["processed_decode"] = self.processed_decoder.counts.as_dict()
        if self.poller is not None:
            out["processed_polls"] = self.poller.stats.as_dict()
        if hasattr(self.fleet, "manifest"):  # containers: the images (reference and id) they ran
            out["containers"] = self.fleet.manifest()
        if self._http is not None:
            outcomes = self._http.column("outcome").to_pylist()
            out["requests"] = {o: outcomes.count(o) for o in (ACCEPTED, REJECTED, "indefinite")}
        return out


def file_digests(argv: list[str], known: dict[str, str]) -> dict[str, str]:
    """The sha256 of each file the command line names by its path (the service's jar, a script): what ran,
    version for version. `known` caches digests by path for the run (instances share their jar)."""
    out = {}
    for arg in argv:
        path = Path(arg)
        if arg.startswith("-") or not path.is_file():
            continue
        if arg not in known:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            known[arg] = f"sha256:{digest.hexdigest()}"
        out[arg] = known[arg]
    return out


class PollingFleet:
    """The run's `ServiceFleet` for the fault timeline: `kill`, `terminate` and `restart` end an instance,
    so they poll the processed source first (`AppRun.poll_before_end`); the rest is the fleet's."""

    def __init__(self, app: AppRun) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app.fleet, name)

    def kill(self, name: str, i: int) -> None:
        self.app.poll_before_end(name)
        self.app.fleet.kill(name, i)

    def terminate(self, name: str, i: int, timeout_s: float = 30.0) -> bool:
        self.app.poll_before_end(name)
        return self.app.fleet.terminate(name, i, timeout_s)

    def restart(self, name: str, i: int) -> None:
        self.app.poll_before_end(name)
        self.app.fleet.restart(name, i)


class _LazyIndex(Mapping):
    """The run's event index as a poller sees it while the drive runs: every id of the driver's form
    (`spec.application.event_id`), known before any request."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def __getitem__(self, event_id: str) -> int:
        seq = event_seq(self.run_id, event_id)
        if seq is None:
            raise KeyError(event_id)
        return make_value_id(PRODUCER, seq)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


def _processed_decoder(section: ApplicationSection, run_id: str, index: Mapping[str, int]) -> EventDecoder | None:
    """The decoder of what the consumer side processed (None without a source). A polled source (HTTP,
    PostgreSQL) is read while the drive runs, so it looks ids up by their form; an output topic is read
    after the drive, by `index`, the requests actually sent."""
    processed = section.processed
    if processed is None:
        return None
    return EventDecoder(processed.identity or section.identity,
                        index if processed.source == "topic" else _LazyIndex(run_id))


def _describe_identity(section: ApplicationSection) -> str:
    ident = section.identity
    return f"{ident.kind}: {ident.argument}" if ident.argument else ident.kind

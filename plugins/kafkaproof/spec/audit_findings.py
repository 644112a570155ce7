"""An audit's findings: what the discovered settings mean for reliability, before any replica runs.

Pure functions over what discovery read (`ClusterInventory`), the team's client settings (`ClientSettings`,
or None: the client's defaults) and the audit's plan (`AuditPlan`). Each finding names the setting and the
value read and says, in one sentence a person can act on, what it does under a broker outage and what to
change. The replica runs prove or disprove them; the findings are what a reader of the configuration
alone can say (docs/audit.md lists them).

Order: broker scope, then client, then topic; within a scope high severity first, then the order the
checks run in (topics in discovery order).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Mapping

from .audit_plan import AuditPlan, delivery_timeout_ms, looks_auto_created
from .client_settings import ClientSettings
from .clients import ACKS_ALL, producer_settings
from .inventory import ClusterInventory, TopicInfo

SEVERITIES = ("high", "medium", "low")
SCOPES = ("broker", "client", "topic")
# A delivery timeout below this fails sends during an ordinary leader election or broker restart.
SHORT_DELIVERY_TIMEOUT_MS = 30_000
# Kafka's "never" for log.flush.interval.messages (Long.MAX_VALUE): the OS flushes, replication makes writes durable.
NEVER_FLUSH = "9223372036854775807"
# Client defaults of enable.auto.commit: true in kafka-clients and librdkafka (Spring's listener turns it off).
AUTO_COMMIT_DEFAULT = {"java": True, "librdkafka": True, "spring": False}
# Client defaults of isolation.level: kafka-clients read_uncommitted, librdkafka read_committed.
ISOLATION_DEFAULT = {"java": "read_uncommitted", "librdkafka": "read_committed"}


@dataclass(frozen=True)
class Finding:
    """One thing the audit noticed: `severity` (high|medium|low), `scope` (broker|client|topic), `subject`
    (the broker setting, client role or topic it is about), `setting` and `value` (what was read), `text`
    (what it means under a broker outage, in one sentence a person can act on)."""

    severity: str
    scope: str
    subject: str
    setting: str
    value: Any
    text: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _int(value: Any) -> int | None:
    try:
        return None if value is None or value == "" else int(str(value).strip())
    except ValueError:
        return None


def _true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


# --- broker scope ------------------------------------------------------------------------------

def broker_findings(inventory: ClusterInventory, transactions: bool = False) -> Iterator[Finding]:
    """Pure: what the brokers' settings (the first broker's, `broker_config`) mean for every topic."""
    cfg = inventory.broker_config
    default_rf = _int(cfg.get("default.replication.factor"))
    auto = _true(cfg.get("auto.create.topics.enable"))
    brokers = sum(1 for n in inventory.nodes if n.roles is None or "broker" in n.roles)

    def finding(severity: str, setting: str, value: Any, text: str) -> Finding:
        return Finding(severity, "broker", "brokers", setting, value, text)

    if inventory.nodes and brokers < 3:
        yield finding("high" if brokers == 1 else "medium", "brokers", brokers,
                      f"the cluster has {brokers} broker{'s' if brokers != 1 else ''}: no topic can have 3 replicas, "
                      "so a broker outage leaves topics with one copy or none; run at least 3 brokers")
    if auto and default_rf == 1:
        yield finding("high", "auto.create.topics.enable", "true",
                      "auto-created topics get RF 1 (default.replication.factor 1): any broker outage makes them "
                      "unavailable and a lost disk loses their events; set auto.create.topics.enable=false and "
                      "create topics by hand with RF 3, or raise default.replication.factor to 3")
    elif auto:
        yield finding("low", "auto.create.topics.enable", "true",
                      "a producer's typo or a consumer's subscription creates a topic with the brokers' defaults "
                      "and nobody's review; set auto.create.topics.enable=false and create topics by hand")
    if default_rf is not None and default_rf < 3 and not (auto and default_rf == 1):
        yield finding("medium", "default.replication.factor", default_rf,
                      f"topics created without a replication factor get {default_rf} "
                      f"cop{'y' if default_rf == 1 else 'ies'}: "
                      + ("a broker outage makes them unavailable" if default_rf == 1 else
                         "one broker down leaves one copy, and a second failure loses events")
                      + "; set default.replication.factor=3")
    if _int(cfg.get("min.insync.replicas")) == 1:
        yield finding("medium", "min.insync.replicas", 1,
                      "topics that do not set min.insync.replicas accept an acks=all write on the leader alone "
                      "while followers lag: a leader lost then loses acknowledged events; set "
                      "min.insync.replicas=2 on the brokers (with RF 3)")
    if _true(cfg.get("unclean.leader.election.enable")):
        yield finding("high", "unclean.leader.election.enable", "true",
                      "an out-of-sync replica may become leader: after a leader failure every topic that does not "
                      "override it silently loses acknowledged events; set unclean.leader.election.enable=false")
    offsets_rf = _int(cfg.get("offsets.topic.replication.factor"))
    if offsets_rf is not None and offsets_rf < 3:
        yield finding("high" if offsets_rf == 1 else "medium", "offsets.topic.replication.factor", offsets_rf,
                      f"the consumer groups' committed offsets (__consumer_offsets) have {offsets_rf} "
                      f"cop{'y' if offsets_rf == 1 else 'ies'}: a broker outage blocks commits and group joins, a lost "
                      "disk makes consumers re-read or skip events; set offsets.topic.replication.factor=3 (it "
                      "applies when __consumer_offsets is created: raise an existing one by reassignment)")
    txn_rf = _int(cfg.get("transaction.state.log.replication.factor"))
    if txn_rf is not None and txn_rf < 3:
        yield finding("high" if transactions and txn_rf == 1 else "medium" if transactions else "low",
                      "transaction.state.log.replication.factor", txn_rf,
                      f"the transaction log (__transaction_state) has {txn_rf} cop{'y' if txn_rf == 1 else 'ies'}: "
                      "a broker outage blocks transactional producers and can leave transactions hanging; set "
                      "transaction.state.log.replication.factor=3"
                      + ("" if transactions else " (your producers are not transactional: matters once they are)"))
    txn_isr = _int(cfg.get("transaction.state.log.min.isr"))
    if txn_isr is not None and txn_isr < 2 and (txn_rf or 0) >= 2:
        yield finding("medium" if transactions else "low", "transaction.state.log.min.isr", txn_isr,
                      "a transaction's commit is written to the transaction log's leader alone while followers "
                      "lag: a leader lost then forgets commits; set transaction.state.log.min.isr=2")
    flush = {k: cfg.get(k) for k in ("log.flush.interval.messages", "log.flush.interval.ms")
             if cfg.get(k) not in (None, "", NEVER_FLUSH)}
    if flush:
        yield finding("low", ", ".join(flush), ", ".join(str(v) for v in flush.values()),
                      "the brokers force a disk flush (" + ", ".join(f"{k}={v}" for k, v in flush.items())
                      + "): it costs throughput and does not replace replication, which is what keeps events "
                      "through a broker's power loss; prefer RF 3 with min.insync.replicas=2 and leave flushing "
                      "to the OS")
    for key, values in inventory.broker_config_differs.items():
        yield finding("medium", key, ", ".join(f"broker {n}: {'not set' if v is None else v}"
                                               for n, v in values.items()),
                      f"the brokers differ in {key}: topics behave differently depending on the broker that creates "
                      "or leads them; give every broker the same value")


# --- client scope ------------------------------------------------------------------------------

def client_findings(settings: ClientSettings | None, plan: AuditPlan) -> Iterator[Finding]:
    """Pure: what the team's producer and consumer settings mean under a broker outage (nothing but a note
    when no settings were given: the team's own clients are not known)."""
    if settings is None:
        yield Finding("low", "client", "clients", "--app-config", "not given",
                      f"no client settings were given: the replica's clients run with {plan.client}'s defaults, "
                      "which may not be your applications'; give your producers' and consumers' settings "
                      "with --app-config (a properties file or Spring's application.yml)")
        return
    yield from producer_findings(settings)
    yield from consumer_findings(settings)
    if settings.unknown:
        keys = [u.key for u in settings.unknown]
        yield Finding("medium", "client", settings.source, "unknown keys", keys,
                      f"{len(keys)} key{'s' if len(keys) != 1 else ''} of {settings.source} map to no "
                      "client property, so neither your clients nor the replica's use them: "
                      + "; ".join(f"{u.key}" + (f" (line {u.line})" if u.line else "") + f": {u.reason}"
                                  for u in settings.unknown)
                      + "; check each is what you meant")


def producer_findings(settings: ClientSettings) -> Iterator[Finding]:
    """Pure: acks, idempotence, retries, delivery timeout and in-flight requests of the team's producer."""
    config = settings.producer
    ps = producer_settings({"client": settings.client, "config": config, "transactions": settings.transactions}, 0)

    def finding(severity: str, setting: str, value: Any, text: str) -> Finding:
        return Finding(severity, "client", "producer", setting, value, text)

    if ps["acks"] == 0:
        yield finding("high", "acks", config.get("acks"),
                      "acks=0: no broker acknowledges a write, so events lost in a leader failure or a full "
                      "buffer vanish without an error; set acks=all")
    elif ps["acks"] == 1:
        yield finding("high", "acks", config.get("acks"),
                      "acks=1: the leader acknowledges alone; a leader lost before its followers copy a write "
                      "loses an event the application thinks was delivered; set acks=all")
    if not ps["idempotence"]:
        set_off = config.get("enable.idempotence") is not None
        yield finding("medium", "enable.idempotence", config.get("enable.idempotence", "false (default)"),
                      "idempotence is " + ("off" if set_off else "off by the client's defaults")
                      + ": a send retried after a lost acknowledgement is written twice (duplicates) and may "
                      "land after later ones; set enable.idempotence=true"
                      + (" (with acks=all)" if ps["acks"] != ACKS_ALL else ""))
    retries = next((config[k] for k in ("retries", "message.send.max.retries") if config.get(k) is not None), None)
    if _int(retries) == 0:
        yield finding("high", "retries", 0,
                      "retries=0: every send that meets a leader change fails at once, and each such event is not "
                      "delivered unless the application resends it; remove retries (the default retries until "
                      "delivery.timeout.ms)")
    timeout = delivery_timeout_ms(settings.client, config)
    if timeout < SHORT_DELIVERY_TIMEOUT_MS:
        key = "message.timeout.ms" if "message.timeout.ms" in config and "delivery.timeout.ms" not in config \
            else "delivery.timeout.ms"
        yield finding("medium", key, timeout,
                      f"{key}={timeout}: a send not acknowledged within {timeout / 1000:g} s fails, so a leader "
                      "election or broker restart longer than that leaves events not delivered unless the "
                      f"application resends them; raise it to 120000 or more")
    in_flight = _int(config.get("max.in.flight.requests.per.connection", config.get("max.in.flight")))
    if in_flight is None:
        in_flight = 5 if settings.client == "java" else 1_000_000
    if not ps["idempotence"] and in_flight > 1 and _int(retries) != 0:
        yield finding("low", "max.in.flight.requests.per.connection", in_flight,
                      f"{in_flight} requests in flight with retries and no idempotence: a retried batch can land "
                      "after a later one (reordering); turn idempotence on, which keeps the order")


def consumer_findings(settings: ClientSettings) -> Iterator[Finding]:
    """Pure: commits and isolation of the team's consumer (only what the file says or its client's defaults)."""
    config = settings.consumer
    spring = settings.format == "spring"
    if not config and not spring:
        return  # a producer's file: nothing is known of the consumer
    auto = config.get("enable.auto.commit")
    auto_on = _true(auto) if auto is not None else AUTO_COMMIT_DEFAULT["spring" if spring else settings.client]
    if auto_on:
        interval = config.get("auto.commit.interval.ms", 5000)
        yield Finding("medium", "client", "consumer", "enable.auto.commit",
                      "true" if auto is not None else "true (default)",
                      f"offsets are committed every {interval} ms whatever was processed: a consumer that crashes "
                      "after a commit and before processing skips those events, one that crashes before it "
                      "processes them again; set enable.auto.commit=false and commit after processing")
    isolation = str(config.get("isolation.level") or ISOLATION_DEFAULT.get(settings.client, "read_uncommitted"))
    if settings.transactions and isolation != "read_committed":
        yield Finding("high", "client", "consumer", "isolation.level", isolation,
                      f"the producers write in transactions but consumers read {isolation}: they see events of "
                      "aborted transactions and of transactions not committed yet; set "
                      "isolation.level=read_committed")


# --- topic scope -------------------------------------------------------------------------------

def topic_findings(topic: TopicInfo, broker_config: Mapping[str, Any], acks_all: bool = True) -> Iterator[Finding]:
    """Pure: what one topic's own shape and settings mean under a broker outage."""
    rf, isr = topic.replication_factor, topic.min_insync_replicas

    def finding(severity: str, setting: str, value: Any, text: str) -> Finding:
        return Finding(severity, "topic", topic.name, setting, value, text)

    if topic.offline or topic.under_replicated:
        yield finding("high", "partitions", f"{topic.offline} offline, {topic.under_replicated} under-replicated",
                      f"right now {topic.offline} partition(s) have no leader and {topic.under_replicated} have "
                      "fewer in-sync replicas than replicas: the next broker outage may make them unavailable "
                      "or lose events; bring the missing replicas back before anything else")
    if rf == 1:
        yield finding("high", "replication_factor", 1,
                      "RF 1: one copy; while its broker is down the topic's partitions are offline (events not "
                      "delivered) and a lost disk loses them; recreate it with RF 3 and min.insync.replicas=2")
    elif rf == 2:
        yield finding("medium", "replication_factor", 2,
                      "RF 2: " + ("one broker down stops every acks=all write (min.insync.replicas 2)" if isr == 2
                                  else "a write acknowledged by one copy is lost when that broker fails")
                      + "; raise it to RF 3 with min.insync.replicas=2")
    if isr == 1 and rf >= 3:
        yield finding("medium", "min.insync.replicas", 1,
                      f"min.insync.replicas 1 with RF {rf}: an acks=all write is acknowledged by the leader alone "
                      "while followers lag, and a leader lost then loses acknowledged events; set "
                      "min.insync.replicas=2")
    if isr is not None and rf > 1 and isr >= rf:
        yield finding("high", "min.insync.replicas", isr,
                      f"min.insync.replicas {isr} with RF {rf}: "
                      + ("every acks=all write is refused (NOT_ENOUGH_REPLICAS), even with every broker up"
                         if isr > rf else "with acks=all, any one broker down makes the topic refuse every write")
                      + f" ({'your producers use acks=all' if acks_all else 'your producers do not use acks=all yet'})"
                      f"; set min.insync.replicas to {max(1, rf - 1)}"
                      + (" and RF 3" if rf < 3 else ""))
    inherited = str(broker_config.get("unclean.leader.election.enable", "false")).lower() == "true"
    if topic.unclean_leader_election and ("unclean.leader.election.enable" in topic.overrides or not inherited):
        yield finding("high", "unclean.leader.election.enable", "true",
                      "unclean leader election is on for this topic: an out-of-sync replica may become leader "
                      "after a failure and acknowledged events are lost silently; set it to false")
    if looks_auto_created(topic, broker_config):
        yield finding("medium", "auto-created", "looks auto-created",
                      f"looks auto-created (the brokers' defaults, nothing set on it: {topic.partitions} "
                      f"partition{'s' if topic.partitions != 1 else ''}, RF {rf}): its reliability is whatever the "
                      "brokers' defaults are, and a change of them changes nothing here; create it by hand with "
                      "RF 3 and min.insync.replicas=2")
    policy = str(topic.config.get("cleanup.policy") or "")
    if "compact" in policy and "delete" in policy:
        retention = topic.config.get("retention.ms")
        yield finding("medium", "cleanup.policy", policy,
                      "compacted and deleted: a key's latest value is deleted too once it is older than "
                      f"retention.ms ({'not set' if retention is None else retention}), so a table read from this "
                      "topic loses keys; use cleanup.policy=compact alone for a table")
    elif "compact" in policy:
        yield finding("low", "cleanup.policy", policy,
                      "compacted: only each key's latest value is kept, so a consumer that falls behind sees only "
                      "the latest values, and a tombstone (a record without a value) removes a key; fine for a table, "
                      "not for a log of events")
    flush = {k: topic.config.get(k) for k in ("flush.messages", "flush.ms") if k in topic.overrides}
    if flush:
        yield finding("low", ", ".join(flush), ", ".join(str(v) for v in flush.values()),
                      "the topic forces disk flushes (" + ", ".join(f"{k}={v}" for k, v in flush.items())
                      + "): it costs throughput and does not replace replication; prefer RF 3 with "
                      "min.insync.replicas=2")


# --- all ---------------------------------------------------------------------------------------

def _ordered(findings: list[Finding]) -> list[Finding]:
    """Scope order, then high first; otherwise as produced (sorted() is stable)."""
    return sorted(findings, key=lambda f: (SCOPES.index(f.scope), SEVERITIES.index(f.severity)))


def audit_findings(inventory: ClusterInventory, settings: ClientSettings | None, plan: AuditPlan) -> list[Finding]:
    """Every finding: broker scope first, then client, then topic; high severity first within a scope."""
    transactions = bool(plan.transactions or (settings and settings.transactions))
    acks_all = settings is None or settings.producer_summary()["acks"] == ACKS_ALL
    checks: list[Callable[[], Iterator[Finding]]] = [
        lambda: broker_findings(inventory, transactions), lambda: client_findings(settings, plan)]
    checks += [lambda t=t: topic_findings(t, inventory.broker_config, acks_all)
               for t in inventory.topics if not t.internal]
    return _ordered([f for check in checks for f in check()])

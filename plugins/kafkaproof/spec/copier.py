"""A scenario's `pipeline` section (issue 43): an exactly-once read-process-write copier workload.

N copier processes consume the scenario topic (the input, written by the scenario's ordinary producers) in
one group, produce one output per input (keeping its value id) to the output topic and commit the input
offsets inside the transaction (`send_offsets_to_transaction`); a downstream reader reads the output. The
copiers take the places of the scenario's consumers (`consumers.count` = `pipeline.copiers`), so
`consumer:<i>` faults kill, stop or pause copier i, and the run restarts it with the same
`transactional.id` (fencing its earlier incarnation). The ledger: spec/pipeline_ledger.py.
`consumers.client` picks the copier: librdkafka's (run/copier.py) or the Java driver's (CopierWorker.java,
`consumers.client: java`); both write the same ledger.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

SECTION = "pipeline"
ISOLATIONS = ("read_committed", "read_uncommitted")
MAX_COPIERS = 8
DEFAULT_BATCH_SIZE = 50
DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000
# Producer settings a transactional copier cannot run with: (setting, refused values, why).
_REFUSED_PRODUCER = (("enable.idempotence", ("false",), "transactions need idempotence"),
                     ("acks", ("0", "1"), "transactions need acks=all (-1)"))

SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["copiers"],
    "description": "an exactly-once read-process-write copier workload on the scenario topic (the input)",
    "properties": {
        "copiers": {"type": "integer", "minimum": 1, "maximum": MAX_COPIERS,
                    "description": "copier processes in one consumer group (they are consumer:0..N-1)"},
        "output_topic": {"type": "string", "minLength": 1,
                         "description": "the topic the copiers write (default: <topic>-out); created by the run"},
        "output_partitions": {"type": "integer", "minimum": 1,
                              "description": "the output topic's partitions (default: the input topic's)"},
        "batch_size": {"type": "integer", "minimum": 1, "maximum": 10_000,
                       "description": f"input records per transaction at most (default {DEFAULT_BATCH_SIZE})"},
        "abort_probability": {"type": "number", "minimum": 0, "maximum": 1,
                              "description": "abort a batch's transaction instead of committing it (default 0); "
                                             "the copier then re-reads the batch"},
        "downstream_isolation": {"enum": list(ISOLATIONS),
                                 "description": "isolation.level of the downstream reader of the output (default "
                                                "read_committed; read_uncommitted: a negative control)"},
        "transactional_id_prefix": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,100}$",
                                    "description": "copier i uses transactional.id <prefix>-<i> (default kp-<name>)"},
        "transaction_timeout_ms": {"type": "integer", "minimum": 1000, "maximum": 900_000,
                                   "description": "transaction.timeout.ms of the copiers (default "
                                                  f"{DEFAULT_TRANSACTION_TIMEOUT_MS}): how long the coordinator "
                                                  "waits before aborting a dead copier's open transaction"},
        "producer_config": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
                            "description": "the copiers' producer settings in their client's names (consumers."
                                           "client: librdkafka or java); consumers.config holds their consumer's"},
        "ordered_output": {"type": "boolean",
                           "description": "write each output to its input's partition (default true; needs "
                                          "output_partitions >= the input's)"},
    }}


def defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Pure: the pipeline section with every default filled in (`data`: the scenario after its defaults)."""
    section = dict(data[SECTION])
    topic = data["topic"]
    section.setdefault("output_topic", f"{topic['name']}-out")
    section.setdefault("output_partitions", topic["partitions"])
    section.setdefault("batch_size", DEFAULT_BATCH_SIZE)
    section.setdefault("abort_probability", 0.0)
    section.setdefault("downstream_isolation", "read_committed")
    section.setdefault("transactional_id_prefix", f"kp-{data['name']}")
    section.setdefault("transaction_timeout_ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
    section.setdefault("ordered_output", True)
    section.setdefault("producer_config", {})
    return section


def transactional_id(section: dict[str, Any], copier: int) -> str:
    """Pure: copier `copier`'s transactional.id; a restarted copier keeps it (and so fences its predecessor)."""
    return f"{section['transactional_id_prefix']}-{copier}"


def check_pipeline(data: dict[str, Any], given_consumers: dict[str, Any], fail: Callable[[str, str], None]) -> None:
    """Check the `pipeline` section against the rest of the scenario and fill in its defaults (in place):
    the copiers become the scenario's consumers. `given_consumers`: the `consumers` section as written.
    Without a pipeline, refuse the claim that needs one."""
    if SECTION not in data:
        if "exactly_once_pipeline" in (data.get("claims") or {}):
            fail("claims.exactly_once_pipeline", "needs a pipeline section (the copiers whose transactions it "
                                                 "judges), e.g. `pipeline: {copiers: 2}`")
        return
    section = data[SECTION] = defaults(data)
    where = SECTION
    if data.get("application"):
        fail(where, "an application scenario has no copier workload; remove pipeline or application")
    prod, cons = data["producers"], data["consumers"]
    if prod.get("transactions"):
        fail("producers.transactions", "the pipeline's input producers are ordinary ones; the copiers run the "
                                       "transactions (remove producers.transactions)")
    if "count" in given_consumers and given_consumers["count"] != section["copiers"]:
        fail("consumers.count", f"{given_consumers['count']}, but the copiers are the consumers: pipeline.copiers "
                                f"is {section['copiers']} (drop consumers.count)")
    if cons.get("mode", "subscribe") != "subscribe":
        fail("consumers.mode", "copiers consume in a group: subscribe only")
    if str(cons["config"].get("enable.auto.commit", "false")).lower() == "true":
        fail("consumers.config.enable.auto.commit", "copiers commit offsets inside their transactions; remove it")
    for name, refused, why in _REFUSED_PRODUCER:
        if str(section["producer_config"].get(name, "")).lower() in refused:
            fail(f"{where}.producer_config.{name}", f"{section['producer_config'][name]!r}: {why}")
    if "transactional.id" in section["producer_config"]:
        fail(f"{where}.producer_config.transactional.id", "set by the run (<transactional_id_prefix>-<copier>); "
                                                          "use transactional_id_prefix")
    cons["count"] = section["copiers"]
    if section["output_topic"] == data["topic"]["name"]:
        fail(f"{where}.output_topic", f"{section['output_topic']!r} is the input topic; name another topic")
    if section["ordered_output"] and section["output_partitions"] < data["topic"]["partitions"]:
        fail(f"{where}.output_partitions", f"{section['output_partitions']} is fewer than the input's "
                                           f"{data['topic']['partitions']} partitions, and ordered_output writes "
                                           f"each output to its input's partition (set ordered_output: false)")
    if section["transaction_timeout_ms"] >= data["timeout_s"] * 1000:
        fail(f"{where}.transaction_timeout_ms", f"{section['transaction_timeout_ms']} ms is longer than the run "
                                                f"(timeout_s {data['timeout_s']}): a dead copier's transaction "
                                                f"would outlive it")


def prefix_clashes(scenarios: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """Pure: the transactional.id prefixes two scenarios (name, data) share, each as one message; copiers of
    two scenarios on one cluster with one prefix would fence each other."""
    owners: dict[str, str] = {}
    clashes = []
    for name, data in scenarios:
        section = data.get(SECTION)
        if not section:
            continue
        prefix = section["transactional_id_prefix"]
        if prefix in owners:
            clashes.append(f"{name}: pipeline.transactional_id_prefix {prefix!r} is also {owners[prefix]}'s: "
                           f"their copiers would fence each other on one cluster; give one another prefix")
        owners.setdefault(prefix, name)
    return clashes

"""The anomaly vocabulary: every kind kafkaproof detects, in report order, with what it means.

One place for the names, the value-level flag columns of `analysis/values.parquet` and the
sentences a report says about them. Detection lives in `spark/analyze.py` (which runs under
spark-submit without this package and keeps a checked copy of `KINDS` and `VALUE_FLAGS`; a
unit test keeps them equal); policy — which kinds a guarantee or a claim forbids — lives in
`expectations/policy.yaml`. docs/analysis.md defines each kind precisely.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class AnomalyKind:
    """One kind of anomaly."""

    name: str
    flag: str | None      # the values.parquet column marking it (value-level kinds), else None
    one: str              # a sentence about one occurrence
    many: str             # ... and about `{n}` of them
    expectable: bool = True  # a negative control may `expect.detect` it
    allowable: bool = False  # a scenario may accept it with a stated reason (`allow: {kind: reason}`)

    def sentence(self, n: int) -> str:
        """One plain sentence saying what `n` anomalies of this kind mean."""
        return self.one if n == 1 else self.many.format(n=f"{n:,}")


VOCABULARY: tuple[AnomalyKind, ...] = (
    AnomalyKind("lost", "lost",
                "1 acknowledged value was lost: it is not in the log after the faults healed.",
                "{n} acknowledged values were lost: they are not in the log after the faults healed."),
    AnomalyKind("lost_unconfirmed", "lost_unconfirmed",
                "1 value sent with acks=0 never reached the log (no broker acknowledged it).",
                "{n} values sent with acks=0 never reached the log (no broker acknowledged them)."),
    AnomalyKind("unseen", "unseen",
                "1 acknowledged value could not be checked: the final drain never reached its offset.",
                "{n} acknowledged values could not be checked: the final drain never reached their offsets.",
                expectable=False),  # makes the run incomplete: never judged
    AnomalyKind("not_delivered", "not_delivered",
                "1 value in the log was never delivered to the consumer group.",
                "{n} values in the log were never delivered to the consumer group."),
    AnomalyKind("duplicates", "duplicate",
                "1 value is in the log more than once.", "{n} values are in the log more than once."),
    AnomalyKind("observed_duplicates", "observed_duplicate",
                "1 value was seen at two offsets (acked or read there), though the final log holds it once.",
                "{n} values were seen at two offsets (acked or read there), though the final log holds each once."),
    AnomalyKind("redeliveries", None,
                "1 offset was delivered to the consumer group more than once.",
                "{n} offsets were delivered to the consumer group more than once."),
    AnomalyKind("aborted_reads", "aborted_read",
                "1 value that failed or was rolled back was committed or visible to read_committed readers.",
                "{n} values that failed or were rolled back were committed or visible to read_committed readers."),
    AnomalyKind("dirty_reads", "dirty_read",
                "1 value of an aborted transaction was processed by a read_uncommitted consumer.",
                "{n} values of aborted transactions were processed by read_uncommitted consumers."),
    AnomalyKind("indefinite_landed", "indefinite_landed",
                "1 send that ended without a definite answer did land in the log.",
                "{n} sends that ended without a definite answer did land in the log.",
                expectable=False),  # informational
    AnomalyKind("inconsistent_offsets", None,
                "1 offset holds different values for different observers (ack, consumer, log).",
                "{n} offsets hold different values for different observers (ack, consumer, log)."),
    AnomalyKind("ack_offset_mismatch", None,
                "1 acknowledgement named an offset where the log holds another value or none.",
                "{n} acknowledgements named offsets where the log holds another value or none."),
    AnomalyKind("reordering", None,
                "1 value landed before an earlier value of the same producer.",
                "{n} values landed before earlier values of the same producer."),
    AnomalyKind("poll_skips", None,
                "A consumer skipped over existing records once, in a partition it kept.",
                "Consumers skipped over existing records {n} times, in partitions they kept."),
    AnomalyKind("poll_rewinds", None,
                "A consumer went back to earlier offsets once, in a partition it kept.",
                "Consumers went back to earlier offsets {n} times, in partitions they kept."),
    AnomalyKind("poll_inversion", None,
                "A poll returned a partition's records out of offset order once.",
                "Polls returned a partition's records out of offset order {n} times."),
    AnomalyKind("unknown_values", "unknown_value",
                "1 value in the log was never recorded as sent.",
                "{n} values in the log were never recorded as sent."),
    AnomalyKind("undelivered_attempts", "undelivered",
                "1 value the application tried to send never reached its consumers.",
                "{n} values the application tried to send never reached its consumers."),
    AnomalyKind("reprocessed", "reprocessed",
                "1 value was processed more than once by one consumer group.",
                "{n} values were processed more than once by one consumer group."),
    # An exactly-once pipeline's (issue 43): judged by the claim exactly_once_pipeline, on the pipeline ledger.
    AnomalyKind("eos_lost", None,
                "1 input value of a committed transaction has no committed output.",
                "{n} input values of committed transactions have no committed output."),
    AnomalyKind("eos_duplicated", None,
                "1 input value is in the committed output more than once.",
                "{n} input values are in the committed output more than once."),
    AnomalyKind("eos_aborted_read", None,
                "A read_committed reader of the output saw a record of an aborted transaction once.",
                "Read_committed readers of the output saw records of aborted transactions {n} times."),
    AnomalyKind("precommitted_read", None,
                "A read_committed reader of the output saw an output before its transaction was committed once.",
                "Read_committed readers of the output saw outputs before their transactions were committed {n} times."),
    AnomalyKind("offsets_outputs_disagree", None,
                "1 input's committed offset and its committed output disagree.",
                "{n} inputs' committed offsets and committed outputs disagree."),
    AnomalyKind("eos_late_write", None,
                "1 output of an aborted transaction landed in a later transaction and was committed.",
                "{n} outputs of aborted transactions landed in later transactions and were committed."),
    AnomalyKind("hanging_transaction", None,
                "1 transaction never ended: read_committed readers stall at its partitions' last stable offset.",
                "{n} transactions never ended: read_committed readers stall at their partitions' last stable offset."),
    AnomalyKind("lso_stall", None,
                "1 output partition's last stable offset stood behind an open transaction past its timeout.",
                "Output partitions' last stable offsets stood behind open transactions past their timeout {n} times."),
    AnomalyKind("eos_dirty_read", None,
                "A read_uncommitted reader of the output saw a record of an aborted transaction once (expected).",
                "Read_uncommitted readers of the output saw records of aborted transactions {n} times (expected)."),
    # A share group's (issue 46, KIP-932): judged by the claim share_group, on the share ledger.
    AnomalyKind("share_accepted_twice", None,
                "1 record was accepted more than once across the share group.",
                "{n} records were accepted more than once across the share group."),
    AnomalyKind("share_undelivered", None,
                "1 record in the log was never delivered to the share group.",
                "{n} records in the log were never delivered to the share group."),
    AnomalyKind("share_not_returned", None,
                "1 record released (or whose lock timed out) below the delivery limit never came back.",
                "{n} records released (or whose locks timed out) below the delivery limit never came back."),
    AnomalyKind("share_rejected_returned", None,
                "1 rejected record was delivered again.", "{n} rejected records were delivered again."),
    AnomalyKind("share_concurrent_acquisition", None,
                "1 record was held by two share consumers at the same time.",
                "{n} records were held by two share consumers at the same time."),
    AnomalyKind("share_delivery_count", None,
                "1 record was redelivered with a delivery count other than the previous one + 1.",
                "{n} records were redelivered with delivery counts other than the previous one + 1."),
    AnomalyKind("share_past_limit", None,
                "1 record was delivered past the share group's delivery limit instead of being given up.",
                "{n} records were delivered past the share group's delivery limit instead of being given up."),
    # Commit consistency (issue 45): the group's commits against its consumers' reads (consumer_events).
    AnomalyKind("rewind_below_commit", None,
                "A consumer started a partition below its group's last commit once: committed records came again.",
                "Consumers started partitions below their group's last commit {n} times: committed records came again.",
                allowable=True),
    AnomalyKind("skip_above_commit", None,
                "A consumer started a partition above its group's last commit once, skipping records never read.",
                "Consumers started partitions above their group's last commit {n} times, skipping records never read.",
                allowable=True),
    AnomalyKind("commit_beyond_read", None,
                "A consumer group committed an offset beyond what it had read once.",
                "Consumer groups committed offsets beyond what they had read {n} times."),
    AnomalyKind("commit_regression", None,
                "A consumer group's committed offset went backwards once.",
                "Consumer groups' committed offsets went backwards {n} times."),
    AnomalyKind("double_ownership", None,
                "Two consumers of one group read the same partition at the same time once.",
                "Two consumers of one group read the same partition at the same time {n} times.",
                allowable=True),
)

BY_NAME: dict[str, AnomalyKind] = {k.name: k for k in VOCABULARY}
KINDS: tuple[str, ...] = tuple(k.name for k in VOCABULARY)
VALUE_FLAGS: dict[str, str] = {k.name: k.flag for k in VOCABULARY if k.flag}
EXPECTABLE: tuple[str, ...] = tuple(k.name for k in VOCABULARY if k.expectable)
ALLOWABLE: tuple[str, ...] = tuple(k.name for k in VOCABULARY if k.allowable)


def sentence(kind: str, n: int) -> str:
    """One plain sentence saying what `n` anomalies of `kind` mean (a generic one for an unknown kind)."""
    k = BY_NAME.get(kind)
    if k is None:
        return f"1 anomaly of kind {kind}." if n == 1 else f"{n:,} anomalies of kind {kind}."
    return k.sentence(n)


# A scenario's `allow: {kind: reason}` (issue 45): the kinds it accepts, each with the reason it states.
ALLOW_SCHEMA = {"type": "object", "additionalProperties": {"type": "string"},
                "description": "anomaly kinds this scenario accepts, each with its reason (allowable_with_reason): "
                               + ", ".join(ALLOWABLE)}


def allow_errors(allow: Any, allowable: Sequence[str] = ALLOWABLE) -> list[tuple[str, str]]:
    """Pure: (field, message) for each fault of a scenario's `allow`: not a mapping, a kind that is not
    `allowable`, an empty reason. [] when it is fine (or absent)."""
    if allow is None:
        return []
    if not isinstance(allow, Mapping):
        return [("allow", f"{allow!r} is not a mapping {{anomaly kind: reason}}")]
    errors = []
    for kind, reason in allow.items():
        if kind not in allowable:
            errors.append((f"allow.{kind}", f"not a kind a scenario may allow; allowed: {', '.join(allowable)}"))
        elif not isinstance(reason, str) or not reason.strip():
            errors.append((f"allow.{kind}", f"needs a non-empty reason: why the scenario accepts {kind} "
                                            "(e.g. auto.offset.reset in play)"))
    return errors

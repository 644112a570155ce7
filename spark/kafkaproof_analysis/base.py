"""The job's vocabulary and units: anomaly kinds, value flags, percentiles, the input error, locations.

Pure Python (no pyspark): every other module of the job builds on it.
"""
from __future__ import annotations

import os


ANALYSIS_VERSION = 1
ANALYSIS_DIR = "analysis"

# Every anomaly kind the job counts, in report order. expectations/policy.yaml must
# classify each one (tests/test_analysis.py checks it).
KINDS: tuple[str, ...] = (
    "lost",
    "lost_unconfirmed",
    "unseen",
    "not_delivered",
    "duplicates",
    "observed_duplicates",
    "redeliveries",
    "aborted_reads",
    "dirty_reads",
    "indefinite_landed",
    "inconsistent_offsets",
    "ack_offset_mismatch",
    "reordering",
    "poll_skips",
    "poll_rewinds",
    "poll_inversion",
    "unknown_values",
    "undelivered_attempts",
    "reprocessed",
    "eos_lost",
    "eos_duplicated",
    "eos_aborted_read",
    "precommitted_read",
    "offsets_outputs_disagree",
    "eos_late_write",
    "hanging_transaction",
    "lso_stall",
    "eos_dirty_read",
    "share_accepted_twice",
    "share_undelivered",
    "share_not_returned",
    "share_rejected_returned",
    "share_concurrent_acquisition",
    "share_delivery_count",
    "share_past_limit",
    "rewind_below_commit",
    "skip_above_commit",
    "commit_beyond_read",
    "commit_regression",
    "double_ownership",
)

# Value-level kinds: the values.parquet flag column that marks each.
VALUE_FLAGS: dict[str, str] = {
    "lost": "lost",
    "lost_unconfirmed": "lost_unconfirmed",
    "unseen": "unseen",
    "not_delivered": "not_delivered",
    "duplicates": "duplicate",
    "observed_duplicates": "observed_duplicate",
    "aborted_reads": "aborted_read",
    "dirty_reads": "dirty_read",
    "indefinite_landed": "indefinite_landed",
    "unknown_values": "unknown_value",
    "undelivered_attempts": "undelivered",
    "reprocessed": "reprocessed",
}

PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
EXAMPLES_PER_KIND = 10
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
REBALANCE_EVENTS = ("assign", "revoke", "lost")
NO_FAULT = "(none)"


class AnalysisInputError(Exception):
    """A run directory lacks what the analysis needs (message names the file)."""


def location(run_dir: str) -> str:
    """Pure: a run directory as the job addresses it: a URI as given, a local path as an absolute
    `file:` URI (so a cluster whose default filesystem is HDFS still reads it locally)."""
    text = str(run_dir).rstrip("/") or "/"
    if "://" in text or text.startswith("file:"):
        return text
    return "file://" + os.path.abspath(text)


def location_name(uri: str) -> str:
    """Pure: the last segment of a location (the run id of a run directory)."""
    return uri.rstrip("/").rsplit("/", 1)[-1]

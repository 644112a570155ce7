"""Format-time feature levels of a cluster kafkaproof starts: `cluster.features` and its spelling `cluster.elr`.

`cluster.features` maps a Kafka feature to the level `kafka-storage format --feature name=level` writes into
the new cluster's bootstrap metadata (transaction.version, group.version, eligible.leader.replicas.version,
share.version, streams.version: whatever the cluster's Kafka release has). `cluster.elr: true|false` is only
a shorter spelling of `features: {eligible.leader.replicas.version: 1|0}` (KIP-966, eligible leader
replicas): the check below writes it into the map and drops it, so everything after the check (the cluster
config, the reuse key, the format arguments, the manifest) sees one map.

Checked before anything starts, against the release of `cluster.kafka_version`: a feature that release does
not have, or a level above its highest, is refused naming the field, the version and what it supports
(`RELEASE_FEATURES`: read from the releases' own jars, and checked against them by
tests/unit/spec/test_cluster_features_jars.py whenever those jars are installed). Level 0 of a feature the
release does not have (`elr: false` on 3.9) is what it runs anyway: accepted, and not passed to the format. Only the
local backend formats its nodes: an attached or compose cluster (formatted by its own images) is refused. A
rolling upgrade with `finalize` (the default) raises every feature to the target release's default level
(`kafka-features upgrade`), so a pinned level that release would change (e.g. `elr: false` rolled from 3.9 to
4.3, whose default turns ELR on) is refused too. Pure: no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

ELR_FEATURE = "eligible.leader.replicas.version"
# Decided by other means: metadata.version by the release (`--release-version`), kraft.version by the quorum.
NOT_PINNABLE = {"metadata.version": "the cluster's release decides it (cluster.kafka_version)",
                "kraft.version": "the quorum's configuration decides it (static voters: 0)"}

SCHEMA: dict[str, Any] = {
    "type": "object", "propertyNames": {"pattern": "^[a-z][a-z0-9._-]{0,80}$"},
    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 32767},
    "description": "feature levels the new cluster is formatted with (kafka-storage format --feature "
                   "name=level), e.g. {transaction.version: 2, group.version: 1}; checked against the "
                   "features of cluster.kafka_version's release; local backend only"}
ELR_SCHEMA: dict[str, Any] = {
    "type": "boolean",
    "description": f"eligible leader replicas (KIP-966) on or off: a spelling of features.{ELR_FEATURE}: 1|0"}


@dataclass(frozen=True)
class ReleaseFeatures:
    """The features of one Kafka release: the highest level its `kafka-storage format` accepts for each, and
    the level a cluster formatted without `--feature` (or finalised by `kafka-features upgrade` to this
    release's version mapping) gets."""

    highest: Mapping[str, int]
    default: Mapping[str, int]


# Read from each release's jars: the highest level its `kafka-storage format --feature name=level` accepts
# (3.9.2 formats transaction.version 0 only: "No feature:transaction.version with feature level 1", and has no
# other feature), the defaults from `kafka-features version-mapping --release-version X` (4.3.1's jars).
# Releases not listed are refused, so a level is never guessed.
RELEASE_FEATURES: dict[str, ReleaseFeatures] = {
    "3.9": ReleaseFeatures(highest={"transaction.version": 0}, default={"transaction.version": 0}),
    "4.3": ReleaseFeatures(highest={"transaction.version": 2, "group.version": 1, ELR_FEATURE: 1,
                                    "share.version": 1, "streams.version": 1},
                           default={"transaction.version": 2, "group.version": 1, ELR_FEATURE: 1,
                                    "share.version": 1, "streams.version": 1}),
}


def release_of(version: str) -> str:
    """Pure: `major.minor` of a Kafka version ("" when it has none)."""
    m = re.match(r"^(\d+)\.(\d+)", str(version))
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def supported_text(release: str) -> str:
    """Pure: what a release supports, as error messages say it ("transaction.version 0-2, ...")."""
    known = RELEASE_FEATURES.get(release)
    if known is None:
        return "no features kafkaproof knows the levels of"
    return ", ".join(f"{name} 0-{top}" for name, top in sorted(known.highest.items()))


def level_problem(name: str, level: int, kafka_version: str) -> str | None:
    """Pure: why `kafka_version`'s release cannot be formatted with feature `name` at `level` (None: it can)."""
    release = release_of(kafka_version)
    if name in NOT_PINNABLE:
        return f"{name} is not set through features: {NOT_PINNABLE[name]}"
    known = RELEASE_FEATURES.get(release)
    if known is None:
        return (f"kafkaproof does not know the feature levels of Kafka {kafka_version} (release {release}); it "
                f"knows those of {', '.join(sorted(RELEASE_FEATURES))} (kafka-storage format --feature needs 3.9+)")
    if name not in known.highest:
        if level == 0:  # what that release runs anyway: nothing to format (`format_args` leaves it out)
            return None
        return f"Kafka {kafka_version} has no feature {name!r}; it supports: {supported_text(release)}"
    if not 0 <= level <= known.highest[name]:
        return (f"Kafka {kafka_version} supports {name} levels 0-{known.highest[name]}, not {level}; it supports: "
                f"{supported_text(release)}")
    return None


def finalize_problem(pinned: Mapping[str, int], to_version: str) -> tuple[str, str] | None:
    """Pure: the first pinned feature whose level a rolling upgrade to `to_version` with `finalize` would change
    (finalising raises every feature to that release's default), as (feature, why); None when none would."""
    release = release_of(to_version)
    known = RELEASE_FEATURES.get(release)
    for name, level in sorted(pinned.items()):
        if known is None:
            return name, (f"pinned at {level}, and a rolling_upgrade to {to_version} finalises the features of "
                          f"release {release}, whose levels kafkaproof does not know; set finalize: false")
        target = known.default.get(name)
        if target is not None and target != level:
            return name, (f"pinned at {level}, but the rolling_upgrade to {to_version} finalises release "
                          f"{release}'s feature levels, which set {name} to {target}; set finalize: false or "
                          f"pin {target}")
    return None


def pinned_features(cluster: Mapping[str, Any]) -> dict[str, int]:
    """Pure: the feature levels a resolved scenario's cluster section is formatted with ({} when none)."""
    return {str(k): int(v) for k, v in (cluster.get("features") or {}).items()}


def format_args(features: Mapping[str, int], kafka_version: str) -> list[str]:
    """Pure: the `kafka-storage format` arguments that write these feature levels on `kafka_version` (a level 0
    of a feature its release does not have is what it runs anyway: left out, its format would refuse it)."""
    known = RELEASE_FEATURES.get(release_of(kafka_version))
    return [arg for name, level in sorted(features.items())
            if known is None or name in known.highest or level != 0 for arg in ("--feature", f"{name}={level}")]


def check(data: dict, fail: Callable[[str, str], None]) -> None:
    """Check `cluster.features` / `cluster.elr` of a resolved scenario and fold `elr` into `features` (the one
    map everything after reads). `fail(field, message)` raises."""
    cluster = data["cluster"]
    features = pinned_features(cluster)
    field_of = {name: f"cluster.features.{name}" for name in features}
    if "elr" in cluster:
        elr = int(bool(cluster.pop("elr")))
        if ELR_FEATURE in features and features[ELR_FEATURE] != elr:
            fail("cluster.elr", f"{bool(elr)} contradicts cluster.features.{ELR_FEATURE}: {features[ELR_FEATURE]}; "
                                f"give one of them")
        features[ELR_FEATURE] = elr
        field_of[ELR_FEATURE] = "cluster.elr"
    if not features:
        cluster.pop("features", None)
        return
    first = field_of[sorted(features)[0]]
    if cluster.get("attach"):
        fail(first, f"kafkaproof formats only the clusters it starts; the attached compose project "
                    f"{cluster['attach']} was formatted by its own images (set its features with kafka-features)")
    if cluster.get("backend", "local") != "local":
        fail(first, f"only the local backend formats its nodes with kafka-storage format --feature; the "
                    f"{cluster['backend']} backend's images format themselves")
    version = str(cluster["kafka_version"])
    for name, level in sorted(features.items()):
        if (problem := level_problem(name, level, version)) is not None:
            fail(field_of[name], problem)
    for i, f in enumerate(data.get("faults") or []):
        params = f.get("params") or {}
        if f["kind"] == "rolling_upgrade" and params.get("finalize", True) and params.get("version"):
            if (found := finalize_problem(features, str(params["version"]))) is not None:
                fail(field_of[found[0]], f"{found[1]} (faults[{i}])")
    cluster["features"] = features

"""Admin calls the librdkafka admin client does not make, spoken directly over the Kafka protocol with kio.

`describe_topic_partitions` (DescribeTopicPartitions v0, KIP-966: leader, ISR, eligible leader replicas and
the last known ELR of each partition) and `finalized_features` (ApiVersions v3: the cluster's finalised
feature levels). Plaintext listeners only (a secured CLIENT listener is refused with `KioUnsupported`):
the run's samplers use them on the clusters kafkaproof starts. One blocking request per call, on a short-lived
connection with a timeout: under faults a broker may not answer, and the caller tries the next one.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest, TopicRequest

from ..errors import ClusterError
from ..proxy.errors import KafkaProtocolError
from ..proxy.protocol import LENGTH, decode_response, encode_request, response_correlation_id

CLIENT_ID = "kafkaproof-admin"


class KioUnsupported(ClusterError):
    """The cluster's CLIENT listener is secured: the kio admin calls speak plaintext only."""


@dataclass(frozen=True)
class PartitionElr:
    """One partition as DescribeTopicPartitions answers it (`elr`, `last_known_elr`: None when the answering
    broker's metadata has none: ELR off, or a release without it)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] | None
    last_known_elr: tuple[int, ...] | None
    offline: tuple[int, ...]
    error: int = 0

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form (lists)."""
        return {"partition": self.partition, "leader": self.leader, "leader_epoch": self.leader_epoch,
                "replicas": list(self.replicas), "isr": list(self.isr),
                "elr": None if self.elr is None else list(self.elr),
                "last_known_elr": None if self.last_known_elr is None else list(self.last_known_elr),
                "offline": list(self.offline), "error": self.error}


def check_plaintext(client_config: Mapping[str, Any] | None) -> None:
    """KioUnsupported unless the connection `client_config` describes is plaintext."""
    protocol = str((client_config or {}).get("security.protocol", "PLAINTEXT")).upper()
    if protocol != "PLAINTEXT":
        raise KioUnsupported(f"the kio admin calls speak plaintext only; this cluster's clients use {protocol}")


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ClusterError("the broker closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def call(address: str, payload: Any, timeout_s: float = 2.0) -> Any:
    """Send one request (a kio request entity) to `address` (`host:port`) and return its decoded response.
    ClusterError when the broker cannot be reached or answers garbage."""
    host, _, port = address.rpartition(":")
    correlation_id = 1
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(encode_request(payload, correlation_id, CLIENT_ID))
            (size,) = LENGTH.unpack(_read_exact(sock, LENGTH.size))
            frame = _read_exact(sock, size)
    except (OSError, struct.error) as e:
        raise ClusterError(f"{address}: {type(e).__name__}: {e}") from None
    if response_correlation_id(frame) != correlation_id:
        raise ClusterError(f"{address}: the answer is not to this request")
    try:
        return decode_response(frame, int(payload.__api_key__), int(payload.__version__))
    except KafkaProtocolError as e:
        raise ClusterError(f"{address}: {e}") from None


def describe_topic_partitions(address: str, topic: str, timeout_s: float = 2.0) -> list[PartitionElr]:
    """The partitions of `topic` as the broker at `address` knows them (DescribeTopicPartitions v0). ClusterError
    on a topic-level error (e.g. the broker does not know the topic yet)."""
    response = call(address, DescribeTopicPartitionsRequest(topics=(TopicRequest(name=topic),)), timeout_s)
    out: list[PartitionElr] = []
    for t in response.topics:
        if int(t.error_code.value) != 0:
            raise ClusterError(f"{address}: DescribeTopicPartitions {topic}: {t.error_code.name}")
        for p in t.partitions:
            out.append(PartitionElr(
                partition=int(p.partition_index), leader=int(p.leader_id), leader_epoch=int(p.leader_epoch),
                replicas=_ids(p.replica_nodes), isr=_ids(p.isr_nodes),
                elr=None if p.eligible_leader_replicas is None else _ids(p.eligible_leader_replicas),
                last_known_elr=None if p.last_known_elr is None else _ids(p.last_known_elr),
                offline=_ids(p.offline_replicas), error=int(p.error_code.value)))
    return sorted(out, key=lambda p: p.partition)


def finalized_features(address: str, timeout_s: float = 2.0) -> dict[str, int]:
    """The cluster's finalised feature levels as the broker at `address` reports them (ApiVersions v3); a
    feature finalised at level 0 is not listed by Kafka, so it is absent here too."""
    response = call(address, ApiVersionsRequest(client_software_name="kafkaproof", client_software_version="1"),
                    timeout_s)
    if int(response.error_code.value) != 0:
        raise ClusterError(f"{address}: ApiVersions: {response.error_code.name}")
    return {str(f.name): int(f.max_version_level) for f in response.finalized_features}


def first_answer(addresses: Sequence[str], fn, *args: Any) -> tuple[str, Any]:
    """`fn(address, *args)` of the first address that answers, with that address; ClusterError naming every
    failure when none does."""
    errors = []
    for address in addresses:
        try:
            return address, fn(address, *args)
        except ClusterError as e:
            errors.append(str(e))
    raise ClusterError("no broker answered: " + "; ".join(errors))


def _ids(values: Sequence[Any]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)

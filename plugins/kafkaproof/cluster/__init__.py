"""Cluster backends: a local KRaft cluster on this host, a Docker Compose one, or an existing one; one
interface (`backend.py`).

`start_cluster(ClusterConfig(...))` starts a local or compose one; `attach(name)` finds a running cluster of
any backend; `down_all()` tears down everything kafkaproof started on this host.
"""
from ..spec.cluster import ClusterConfig
from .backend import ClusterBackend, attach, backend_class, down_all, start_cluster, unsupported_faults
from .external import ExternalCluster
from .local import LocalCluster

__all__ = ["ClusterBackend", "ClusterConfig", "ExternalCluster", "LocalCluster", "attach", "backend_class",
           "down_all", "start_cluster", "unsupported_faults"]

"""Cluster backends: a local KRaft cluster on this host, or an existing one; one interface (`backend.py`).

`LocalCluster.up(ClusterConfig(...))` starts one; `attach(name)` finds a running cluster of
any backend; `down_all()` tears down everything kafkaproof started on this host.
"""
from ..spec.cluster import ClusterConfig
from .backend import ClusterBackend, attach, down_all, unsupported_faults
from .external import ExternalCluster
from .local import LocalCluster

__all__ = ["ClusterBackend", "ClusterConfig", "ExternalCluster", "LocalCluster", "attach", "down_all",
           "unsupported_faults"]

"""The fault families' handlers, registered in one place against the registry of `spec.fault_families`.

One module per family (process, network, proxy, rolling, clock, disk, log_dir, corruption, quorum,
consumer, app), each a handler that owns its kinds' checks past the spec's, inject, heal and "took effect" evidence
(the `effect` record and the heal record's fields its FamilySpec lists). `FaultInjector` drives the node families' handlers; the run drives
the consumer and app handlers (it owns the consumer processes and the application's services). README
"Development" says how to add a family.
"""
from __future__ import annotations

from ...spec.fault_families import FAMILIES, family_of
from .app import AppHandler
from .base import FaultHandler, Injection
from .clock import ClockHandler
from .consumer import ConsumerHandler
from .corruption import CorruptionHandler
from .disk import DiskHandler
from .log_dir import LogDirHandler
from .network import NetworkHandler
from .process import ProcessHandler
from .proxy import ProxyHandler
from .quorum import QuorumHandler
from .rolling import RollingHandler

# Family name -> its handler on cluster nodes (the consumer and app families' handlers are made per run:
# ConsumerHandler, AppHandler).
HANDLERS: dict[str, FaultHandler] = {h.family.name: h for h in (
    ProcessHandler(), NetworkHandler(), ProxyHandler(), RollingHandler(), ClockHandler(), DiskHandler(),
    LogDirHandler(), CorruptionHandler(), QuorumHandler())}


def handler_for(kind: str) -> FaultHandler:
    """The handler of a fault kind injected on nodes, or of a step kind (`roll_node`: rolling); FaultError
    naming the kinds otherwise."""
    for handler in HANDLERS.values():
        if kind in handler.family.steps:
            return handler
    return HANDLERS[family_of(kind).name]


__all__ = ["AppHandler", "ConsumerHandler", "FAMILIES", "FaultHandler", "HANDLERS", "Injection", "handler_for"]

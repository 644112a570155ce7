"""Kafka-aware fault proxy (issue 6): lost acks, injected errors, latency, bandwidth, resets, blackholes.

One asyncio TCP listener per broker forwards Kafka frames, tracks request/response
correlation per connection, keeps clients on the proxy by rewriting broker
addresses, and applies fault rules that can be changed at run time. See
docs/proxy.md.
"""
from __future__ import annotations

from .control import ControlClient, ControlServer
from .errors import ControlError, KafkaProtocolError, ProxyError, RuleError, UnsupportedVersion
from .events import EventSink, JsonlEventSink, MemoryEventSink, read_events
from .process import ProxyProcess
from .rules import ACTIONS, Rule, parse_rule
from .server import FaultProxy, Route

__all__ = [
    "ACTIONS",
    "ControlClient",
    "ControlError",
    "ControlServer",
    "EventSink",
    "FaultProxy",
    "JsonlEventSink",
    "KafkaProtocolError",
    "MemoryEventSink",
    "ProxyError",
    "ProxyProcess",
    "Route",
    "Rule",
    "RuleError",
    "UnsupportedVersion",
    "parse_rule",
    "read_events",
]

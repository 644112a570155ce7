"""Exceptions of the Kafka-aware fault proxy."""
from __future__ import annotations

from ..errors import FaultError


class ProxyError(FaultError):
    """Base class of every error the fault proxy raises on purpose."""


class RuleError(ProxyError):
    """A fault rule is invalid (the message names the field), or names an unknown rule id."""


class KafkaProtocolError(ProxyError):
    """A Kafka frame could not be parsed, or a response did not match its request."""


class UnsupportedVersion(KafkaProtocolError):
    """kio has no schema for an API version the proxy needed to decode or encode."""


class ControlError(ProxyError):
    """The control channel of a proxy process failed or the proxy refused a command."""

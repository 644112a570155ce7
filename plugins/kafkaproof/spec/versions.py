"""Kafka versions kafkaproof runs: the default, the production one of the teams it is built for, and which are allowed."""
from __future__ import annotations

import re

from ..errors import InstallError

# Newest 4.x whose artifacts are all on Maven Central (4.4.0's kafka-tools and
# kafka-tools-api were not published there, so core 4.4.0 does not resolve).
DEFAULT_KAFKA_VERSION = "4.3.1"
PRODUCTION_KAFKA_VERSION = "3.9.2"
SUPPORTED_MAJOR_MINOR = re.compile(r"^(3\.[7-9]|4\.\d+)\.\d+$")


def check_version(version: str) -> str:
    """Validate a Kafka version string; returns it unchanged."""
    if not SUPPORTED_MAJOR_MINOR.match(version):
        raise InstallError(
            f"Kafka version {version!r} is not supported: use a release 3.7.x-3.9.x or 4.x "
            f"(default {DEFAULT_KAFKA_VERSION}, production {PRODUCTION_KAFKA_VERSION})")
    return version

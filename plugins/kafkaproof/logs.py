"""Logging set-up: timestamps on every line, to stderr."""
from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-5s %(name)s: %(message)s"
DATEFMT = "%Y-%m-%dT%H:%M:%S"


def setup(verbose: bool = False) -> None:
    """Configure root logging once (level from --verbose or $KAFKAPROOF_LOG_LEVEL)."""
    level = "DEBUG" if verbose else os.environ.get("KAFKAPROOF_LOG_LEVEL", "INFO")
    logging.basicConfig(level=level, format=FORMAT, datefmt=DATEFMT)
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def librdkafka_logger() -> logging.Logger:
    """Logger given to confluent-kafka clients so librdkafka's own lines carry our timestamps."""
    logger = logging.getLogger("kafkaproof.librdkafka")
    return logger

"""Exceptions of kafkaproof. Each message says what went wrong and what to do about it."""
from __future__ import annotations


class KafkaproofError(Exception):
    """Base class: an error kafkaproof can explain to its user."""


class InstallError(KafkaproofError):
    """Kafka (or another prerequisite) could not be installed or found."""


class ClusterError(KafkaproofError):
    """The cluster could not be started, reached or torn down."""


class ClusterNotRunning(ClusterError):
    """An operation needs a running cluster and there is none."""


class FaultError(KafkaproofError):
    """A fault could not be injected or healed, or was refused."""


class ScenarioError(KafkaproofError):
    """A scenario file is invalid. The message names the file and the field."""


class LedgerError(KafkaproofError):
    """A run directory is missing data or is malformed."""


class AnalysisError(KafkaproofError):
    """The analysis job failed."""


class ValidationFailed(KafkaproofError):
    """Great Expectations found a violated expectation."""


class ApplicationError(KafkaproofError):
    """A service of the application under test could not be started, got ready, or be faulted."""

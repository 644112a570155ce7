"""kafkaproof: reliability tests for Apache Kafka (faults, ledgers, Spark analysis, Great Expectations verdicts)."""
__version__ = "0.1.0"

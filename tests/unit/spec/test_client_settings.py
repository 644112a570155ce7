"""A team's client settings files read into one type: Java and librdkafka properties, Spring Boot YAML and properties."""
from __future__ import annotations

import pytest

from kafkaproof.spec.client_settings import (ClientSettings, ClientSettingsError, canonical_key, parse_client_properties,
                                             parse_data_size, parse_duration_ms, parse_spring, read_client_settings)

pytestmark = pytest.mark.unit

SPRING_YML = """\
server:
  port: 8080
spring:
  kafka:
    bootstrapServers:
      - k1:9092
      - k2:9092
    security:
      protocol: SASL_PLAINTEXT
    properties:
      sasl.mechanism: SCRAM-SHA-256
      "[linger.ms]": 5
    producer:
      acks: 1
      batch-size: 16KB
      retries: 3
      properties:
        enable:
          idempotence: false
        delivery.timeout.ms: 30000
    consumer:
      group_id: orders
      enableAutoCommit: false
      autoCommitInterval: 2s
      isolation-level: READ_COMMITTED
      max-poll-interval: PT1M
      colour: blue
    listener:
      ack-mode: record
---
spring:
  config:
    activate:
      on-profile: prod
  kafka:
    producer:
      acks: all
"""


def test_spring_yaml_maps_relaxed_nested_names_like_kafka_properties():
    s = parse_spring(SPRING_YML, "application.yml")
    assert s.format == "spring" and s.client == "java"
    assert s.bootstrap == "k1:9092,k2:9092"
    assert s.connection == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"}
    assert s.producer == {"linger.ms": "5", "acks": "1", "batch.size": 16384, "retries": 3,
                          "enable.idempotence": "false", "delivery.timeout.ms": "30000"}
    assert s.consumer == {"linger.ms": "5", "isolation.level": "read_committed", "group.id": "orders",
                          "enable.auto.commit": False, "auto.commit.interval.ms": 2000,
                          "max.poll.interval.ms": 60000}
    assert s.producer_summary() == {"acks": 1, "idempotence": False, "transactional": False}


def test_spring_default_profile_only_and_says_so():
    s = parse_spring(SPRING_YML, "application.yml")
    assert s.producer["acks"] == "1"  # the prod document's acks=all is not applied
    assert any("profiles prod were not applied" in n for n in s.notes)


def test_spring_unknown_keys_are_listed_with_line_and_reason():
    s = parse_spring(SPRING_YML, "application.yml")
    unknown = {u.key: u for u in s.unknown}
    assert set(unknown) == {"spring.kafka.consumer.colour", "spring.kafka.listener.ack-mode"}
    assert unknown["spring.kafka.consumer.colour"].line == 27
    assert "group-id" in unknown["spring.kafka.consumer.colour"].reason
    assert "spring.kafka.consumer.properties.*" in unknown["spring.kafka.consumer.colour"].reason
    assert "listener container" in unknown["spring.kafka.listener.ack-mode"].reason


def test_spring_properties_file_with_profile_documents_and_brackets():
    text = ("spring.kafka.bootstrap-servers=k1:9092\n"
            "spring.kafka.producer.acks=all\n"
            "spring.kafka.producer.transaction-id-prefix=tx-\n"
            "spring.kafka.producer.properties[max.in.flight.requests.per.connection]=1\n"
            "spring.kafka.producer.buffer-memory=1MB\n"
            "#---\n"
            "spring.config.activate.on-profile=dev\n"
            "spring.kafka.producer.acks=0\n")
    s = parse_spring(text, "application.properties")
    assert s.producer == {"acks": "all", "max.in.flight.requests.per.connection": "1", "buffer.memory": 1048576}
    assert s.transactions and s.producer_summary()["transactional"]
    assert s.consumer == {"isolation.level": "read_uncommitted"}  # Spring Boot's default is always passed
    assert any("read_uncommitted" in n for n in s.notes) and any("dev" in n for n in s.notes)


def test_spring_role_properties_win_over_fields_and_common():
    text = ("spring.kafka.properties.acks=0\nspring.kafka.producer.acks=1\n"
            "spring.kafka.producer.properties.acks=all\nspring.kafka.client-id=app\n")
    s = parse_spring(text, "application.properties")
    assert s.producer == {"acks": "all", "client.id": "app"}


def test_spring_bad_value_names_file_line_key_and_what_is_allowed():
    with pytest.raises(ClientSettingsError) as e:
        parse_spring("spring:\n  kafka:\n    consumer:\n      fetch-max-wait: soon\n", "app.yml")
    assert str(e.value) == ("app.yml, line 4: spring.kafka.consumer.fetch-max-wait='soon': expected a number of "
                            "milliseconds, or 500ms, 5s, 1m, 2h, 1d, PT5S")
    with pytest.raises(ClientSettingsError, match=r"app.yml, line 3: not valid YAML: expected .,. or .\]."):
        parse_spring("spring:\n  kafka: [a\n", "app.yml")
    with pytest.raises(ClientSettingsError, match=r"line 3: expected name=value"):
        parse_spring("a=b\n\nnonsense\n", "application.properties")


def test_relaxed_names_and_values():
    assert canonical_key("spring.kafka.producer.batchSize") == "spring.kafka.producer.batch-size"
    assert canonical_key("spring.kafka.producer.BATCH_SIZE") == "spring.kafka.producer.batch-size"
    assert canonical_key("spring.kafka.properties[sasl.Mechanism]") == "spring.kafka.properties.[sasl.Mechanism]"
    assert canonical_key("spring.kafka.producer.properties.linger_ms") == "spring.kafka.producer.properties.lingerms"
    assert canonical_key("spring.kafka.producerProps.x_y") == "spring.kafka.producer-props.x-y"
    assert [parse_duration_ms(t) for t in ("500", "500ms", "5s", "1m", "PT1.5S", "P1D")] == \
        [500, 500, 5000, 60000, 1500, 86_400_000]
    assert [parse_data_size(t) for t in ("10", "2KB", "1mb")] == [10, 2048, 1048576]
    with pytest.raises(ValueError):
        parse_duration_ms("5 minutes")


def test_plain_properties_files_by_role():
    text = "bootstrap.servers=k1:9092\nacks=all\nsecurity.protocol=SSL\nssl.ca.location=/ca.pem\n"
    s = parse_client_properties(text, "p.properties", "librdkafka", "producer")
    assert (s.client, s.bootstrap, s.producer, s.consumer) == ("librdkafka", "k1:9092", {"acks": "all"}, {})
    assert s.connection == {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}
    both = parse_client_properties("max.block.ms=100\n", "c.properties", "java", "both")
    assert both.producer == both.consumer == {"max.block.ms": "100"}
    with pytest.raises(ClientSettingsError, match="role 'admin' is not allowed; allowed: producer, consumer, both"):
        parse_client_properties("", "c.properties", "java", "admin")


def test_read_detects_the_format_and_round_trips(tmp_path):
    yml = tmp_path / "application.yml"
    yml.write_text(SPRING_YML)
    props = tmp_path / "application.properties"
    props.write_text("spring.kafka.producer.acks=all\n")
    plain = tmp_path / "producer.properties"
    plain.write_text("acks=1\n")
    assert read_client_settings(yml).format == "spring"
    assert read_client_settings(props).producer == {"acks": "all"}
    assert read_client_settings(plain).format == "java"
    s = read_client_settings(yml)
    assert ClientSettings.from_dict(s.to_dict()) == s
    with pytest.raises(ClientSettingsError, match="cannot read it"):
        read_client_settings(tmp_path / "missing.yml")

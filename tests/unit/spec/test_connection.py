"""Connection configs of secured clusters: parsing, checking, redaction, the Java names, the brokers' listener."""
from __future__ import annotations

import json

import pytest

from kafkaproof.cluster import ClusterConfig
from kafkaproof.cluster.security import make_tls_material, provision_security
from kafkaproof.errors import ClusterError
from kafkaproof.run.workers import worker_env
from kafkaproof.spec.cluster import node_properties, plan_nodes, scram_format_args
from kafkaproof.spec.connection import (CONNECTION_ENV, ConnectionConfigError, check_connection, connection_problems,
                                        java_properties, parse_properties, read_client_config, redacted,
                                        split_client_config)

pytestmark = pytest.mark.unit

SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
         "sasl.password": 'pa"ss\\word'}


def test_a_properties_file_gives_the_cluster_and_how_to_connect_leaving_out_what_scenarios_own(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    path = tmp_path / "client.properties"
    path.write_text(f"# staging\nbootstrap.servers=k1:9093,k2:9093\nsecurity.protocol = sasl_ssl\n"
                    f"sasl.mechanism=PLAIN\nsasl.username=alice\nsasl.password=a=b\n! other comment\n"
                    f"ssl.ca.location={ca}\ngroup.id=mine\n")
    bootstrap, conn, left_out = read_client_config(path)
    assert bootstrap == "k1:9093,k2:9093" and left_out == ["group.id"]
    assert conn == {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                    "sasl.password": "a=b", "ssl.ca.location": str(ca)}


@pytest.mark.parametrize("config, message", [
    ({"security.protocol": "SASL_TLS"}, "security.protocol='SASL_TLS' is not allowed; allowed: PLAINTEXT, SSL, "
                                        "SASL_PLAINTEXT, SASL_SSL"),
    ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism; allowed: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism=GSSAPI is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
     "sasl.mechanism=PLAIN needs sasl.password"),
    ({"sasl.mechanism": "PLAIN"}, "sasl.* is set but security.protocol=PLAINTEXT uses no SASL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
      "ssl.ca.location": "/ca.pem"}, "ssl.* files are set but security.protocol=SASL_PLAINTEXT uses no TLS"),
])
def test_a_connection_config_that_cannot_work_is_refused_naming_the_property_and_what_is_allowed(config, message):
    assert any(message in p for p in connection_problems(config)), connection_problems(config)
    with pytest.raises(ConnectionConfigError, match="^staging.properties: "):
        check_connection(config, "staging.properties")


def test_a_missing_ca_file_and_a_line_without_a_value_are_refused(tmp_path):
    with pytest.raises(ConnectionConfigError, match="ssl.ca.location=/nowhere/ca.pem: no such file"):
        check_connection({"security.protocol": "SSL", "ssl.ca.location": "/nowhere/ca.pem"}, "f")
    with pytest.raises(ConnectionConfigError, match="f, line 2: expected name=value"):
        parse_properties("security.protocol=SSL\nsasl.username\n", "f")
    with pytest.raises(ConnectionConfigError, match="cannot read it"):
        read_client_config(tmp_path / "absent.properties")


def test_credentials_are_redacted_and_everything_else_is_kept():
    shown = redacted({**SCRAM, "ssl.key.password": "k", "sasl.jaas.config": "x", "ssl.ca.location": "/ca.pem"})
    assert shown == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                     "sasl.password": "***", "ssl.key.password": "***", "sasl.jaas.config": "***",
                     "ssl.ca.location": "/ca.pem"}
    assert split_client_config({"metadata.broker.list": "k:1", "client.id": "c"}) == ("k:1", {"client.id": "c"}, [])


def test_the_java_driver_gets_a_jaas_line_and_a_pem_trust_store():
    props = java_properties({**SCRAM, "sasl.mechanisms": "SCRAM-SHA-256", "ssl.ca.location": "/ca.pem",
                             "ssl.endpoint.identification.algorithm": "none", "client.id": "c"})
    assert props == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            'password="pa\\"ss\\\\word";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "", "client.id": "c"}
    assert java_properties({}) == {}


def test_workers_get_the_connection_in_their_environment_not_in_their_spec():
    assert json.loads(worker_env(SCRAM)[CONNECTION_ENV]) == SCRAM
    assert CONNECTION_ENV not in worker_env(None)


def test_a_secured_local_cluster_has_a_ca_a_key_store_per_broker_and_a_user(tmp_path):
    cfg = ClusterConfig(brokers=2, controllers=1, client_security="SASL_SSL", sasl_mechanism="SCRAM-SHA-512").validate()
    nodes = plan_nodes(cfg, 3, use_netns=True)
    security, client = provision_security(cfg, nodes, tmp_path)
    assert set(security["keystores"]) == {"1", "2"} and security["users"] == {"kafkaproof": client["sasl.password"]}
    assert client["ssl.ca.location"] == str(tmp_path / "tls" / "ca.pem")
    assert (tmp_path / "tls" / "node-1.pem").stat().st_mode & 0o077 == 0
    assert "10.77.3.2 kafkaproof-node-1" in (tmp_path / "hosts").read_text()
    broker = node_properties(cfg, nodes[0], nodes, tmp_path, 4, security)
    assert broker["listener.security.protocol.map"] == "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert broker["listener.name.client.ssl.keystore.location"] == security["keystores"]["1"]
    assert broker["listener.name.client.scram-sha-512.sasl.jaas.config"].endswith("ScramLoginModule required;")
    controller = node_properties(cfg, nodes[2], nodes, tmp_path, 4, security)
    assert not any(k.startswith("listener.name.client.") for k in controller)
    assert scram_format_args(security) == ["--add-scram",
                                           f"SCRAM-SHA-512=[name=kafkaproof,password={client['sasl.password']}]"]
    plain = {"protocol": "SASL_PLAINTEXT", "mechanism": "PLAIN", "users": {"u": "p"}}
    props = node_properties(cfg, nodes[0], nodes, tmp_path, 4, plain)
    assert props["listener.name.client.plain.sasl.jaas.config"].endswith('PlainLoginModule required user_u="p";')
    assert scram_format_args(plain) == []


def test_the_server_certificates_name_the_node_addresses_and_chain_to_the_ca(tmp_path):
    from cryptography import x509
    tls = make_tls_material(tmp_path, {1: ["10.77.1.2", "broker-1"]}, "c")
    pem = open(tls["keystores"]["1"], "rb").read()
    cert = x509.load_pem_x509_certificates(pem)[0]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.77.1.2"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "broker-1"]
    ca = x509.load_pem_x509_certificate(open(tls["ca"], "rb").read())
    cert.verify_directly_issued_by(ca)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8, as Kafka's PEM key store reads it


@pytest.mark.parametrize("kwargs, message", [
    ({"client_security": "TLS"}, "client_security must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"client_security": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism must be one of"),
    ({"client_security": "SSL", "proxy": True}, "fault proxies cannot front a SSL listener"),
    ({"client_security": "SSL", "backend": "compose"}, "only the local backend starts secured listeners"),
])
def test_a_local_cluster_refuses_security_it_cannot_start(kwargs, message):
    with pytest.raises(ClusterError, match=message):
        ClusterConfig(**kwargs).validate()

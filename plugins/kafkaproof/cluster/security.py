"""A local cluster's secured CLIENT listener: its users, its self-signed TLS material, its client config.

`provision_security` runs once when a cluster starts with `client_security` other than
PLAINTEXT. It makes one user with a random password, and for TLS a certificate authority of
the cluster's own with one server certificate per broker (subject alternative names: the
node's addresses). Everything lives in the cluster's directory, readable by its owner only:
`tls/ca.pem` (what clients trust), `tls/node-<id>.pem` (a broker's key and chain, a PEM key
store) and `client.properties` (the client config, librdkafka names, ready for
`kafkaproof run --client-config`). The state file keeps the section `security` (for the
brokers' properties, also when a node is rolled) and the clients' `client_config`.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

from ..spec.cluster import ClusterConfig
from ..spec.connection import client_properties_text

USER = "kafkaproof"
CERT_DAYS = 30


def _write_private(path: Path, data: bytes | str) -> Path:
    """Write a file only its owner can read (keys, passwords)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafkaproof"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls_material(tls_dir: Path, hosts: dict[int, list[str]], cluster: str) -> dict[str, Any]:
    """A CA and one server key store per node (`hosts`: node id -> its addresses) under `tls_dir`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"kafkaproof CA of cluster {cluster}")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .sign(ca_key, hashes.SHA256()))
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    ca_path = _write_private(tls_dir / "ca.pem", ca_pem)
    keystores = {}
    for node_id, addresses in hosts.items():
        key = ec.generate_private_key(ec.SECP256R1())
        names = [x509.DNSName("localhost")]
        for a in dict.fromkeys(addresses):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(a)))
            except ValueError:
                names.append(x509.DNSName(a))
        cert = (x509.CertificateBuilder().subject_name(_name(f"kafkaproof node {node_id}")).issuer_name(ca_name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .sign(ca_key, hashes.SHA256()))
        # Kafka's PEM key store: an unencrypted PKCS#8 key, then the chain.
        pem = (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
               + cert.public_bytes(serialization.Encoding.PEM) + ca_pem)
        keystores[str(node_id)] = str(_write_private(tls_dir / f"node-{node_id}.pem", pem))
    return {"ca": str(ca_path), "keystores": keystores}


def provision_security(config: ClusterConfig, nodes: list[dict], workdir: Path) -> tuple[dict, dict]:
    """(the state's `security` section, the clients' connection config) of a secured CLIENT listener."""
    protocol = config.client_security
    # A SASL server is created with the name of the broker's own address: a reverse DNS lookup, which
    # in a node's namespace (no DNS server) waited 20 s per client connection. The JVM reads this file instead.
    hosts = workdir / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(
        f"{a} kafkaproof-node-{n['id']}\n" for n in nodes for a in dict.fromkeys((n["host"], n["advertised_host"]))))
    security: dict[str, Any] = {"protocol": protocol, "hosts_file": str(hosts)}
    client: dict[str, Any] = {"security.protocol": protocol}
    if protocol.startswith("SASL_"):
        password = secrets.token_urlsafe(18)
        security.update(mechanism=config.sasl_mechanism, users={USER: password})
        client.update({"sasl.mechanism": config.sasl_mechanism, "sasl.username": USER, "sasl.password": password})
    if protocol in ("SSL", "SASL_SSL"):
        brokers = {n["id"]: [n["host"], n["advertised_host"]] for n in nodes if "broker" in n["roles"]}
        tls = make_tls_material(workdir / "tls", brokers, config.name)
        security["keystores"] = tls["keystores"]
        client["ssl.ca.location"] = tls["ca"]
    return security, client


def write_client_properties(workdir: Path, client: dict, bootstrap: str) -> Path:
    """`client.properties` in the cluster's directory (owner-only: it holds the password)."""
    return _write_private(workdir / "client.properties", client_properties_text(client, bootstrap))

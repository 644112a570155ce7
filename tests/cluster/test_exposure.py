"""Listeners only where they must be (issue 37): the fault proxies in front of an existing cluster listen on
loopback unless `--proxy-listen` says otherwise, and the socket survey (tests/exposure.py) sees it. The
"existing cluster" is kafkaproof's fake broker: no Kafka, a few seconds. The survey during a real proxied
run is in test_proxy_cluster.py."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from exposure import Survey

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

FAKE_BROKER = """
import asyncio
from kafkaproof.proxy.fake_broker import FakeCluster
async def main():
    cluster = FakeCluster({"t": 1})
    brokers = [cluster.add_broker(i) for i in (1, 2)]
    for b in brokers:
        await b.start()
    print(",".join(b.address for b in brokers), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


@pytest.fixture
def fake_bootstrap():
    proc = subprocess.Popen([sys.executable, "-c", FAKE_BROKER], stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def kafkaproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaproof", *args], capture_output=True, text=True, timeout=60)


def host_address() -> str | None:
    """An IPv4 address of this host beyond loopback and kafkaproof's subnets, if it has one."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    for text in out:
        ip = ipaddress.ip_address(text)
        if ip.version == 4 and not ip.is_loopback and not text.startswith(("10.77.", "10.79.")):
            return text
    return None


def proxied(bootstrap: str, *extra: str) -> tuple[Survey, dict]:
    """`cluster up --bootstrap` with the survey running; returns it and the cluster's state (then down)."""
    name = f"exp-{uuid.uuid4().hex[:6]}"
    with Survey(interval_s=0.2) as survey:
        up = kafkaproof("cluster", "up", "--bootstrap", bootstrap, "--name", name, *extra)
        assert up.returncode == 0, up.stderr[-2000:]
        survey.sample()
        st = json.loads((Path(os.environ["KAFKAPROOF_STATE"]) / "clusters" / name / "state.json").read_text())
        down = kafkaproof("cluster", "down", "--name", name)
        assert down.returncode == 0, down.stderr[-2000:]
    return survey, {**st, "stderr": up.stderr}


def test_proxies_before_an_existing_cluster_listen_on_loopback_unless_told_otherwise(fake_bootstrap):
    survey, st = proxied(fake_bootstrap)
    listens = sorted(n["proxy"]["listen"] for n in st["nodes"])
    assert all(a.startswith("127.0.0.1:") for a in listens) and len(listens) == 2
    seen = {f"{l.address}:{l.port}" for l in survey.seen}
    assert set(listens) <= seen, survey.report()  # the survey saw the proxies themselves
    assert not survey.exposed(), survey.report()

    wildcard = kafkaproof("cluster", "up", "--bootstrap", fake_bootstrap, "--proxy-listen", "0.0.0.0")
    assert wildcard.returncode != 0 and "a wildcard would listen on every interface" in wildcard.stderr
    alone = kafkaproof("run", "baseline", "--proxy-listen", "127.0.0.1")
    assert alone.returncode != 0 and "--proxy-listen is for the fault proxies in front of an existing" in alone.stderr

    address = host_address()
    if address is None:
        pytest.skip("this host has no address beyond loopback: --proxy-listen elsewhere is not testable")
    survey, st = proxied(fake_bootstrap, "--proxy-listen", address)
    assert sorted(f"{l.address}:{l.port}" for l in survey.exposed()) == sorted(
        n["proxy"]["listen"] for n in st["nodes"]), survey.report()
    assert f"the fault proxies listen on {address}, beyond this host" in st["stderr"]

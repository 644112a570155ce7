"""The listening-socket survey's pure parts (tests/exposure.py): parsing `ss`, what counts as exposed."""
from __future__ import annotations

import pytest

from exposure import Listener, exposed, is_allowed, our_pids, parse_ss

pytestmark = pytest.mark.unit

SS = """\
tcp LISTEN 0      5               127.0.0.1:59141 0.0.0.0:* users:(("python",pid=10372,fd=5))
tcp LISTEN 0      128               0.0.0.0:2024  0.0.0.0:*
tcp LISTEN 0      4096   [::ffff:127.0.0.1]:44563       *:* users:(("java",pid=10279,fd=314))
tcp LISTEN 0      4096                    *:8080        *:* users:(("airflow",pid=7,fd=3),("airflow",pid=8,fd=3))
tcp LISTEN 0      4096                 [::]:22         [::]:* users:(("sshd",pid=1,fd=4))
tcp LISTEN 0      511     10.77.1.1%kp1n1h:9092   0.0.0.0:* users:(("python3",pid=42,fd=6))
udp UNCONN 0      0           192.0.2.2:5353    0.0.0.0:* users:(("python3",pid=42,fd=9))
tcp LISTEN 0      100               [::1]:25        [::]:*
"""


def test_ss_lines_become_listeners_with_their_pids():
    found = parse_ss(SS)
    assert found[0] == Listener("tcp", "127.0.0.1", 59141, (10372,), "python")
    assert found[1] == Listener("tcp", "*", 2024, (), "")
    assert found[2].address == "127.0.0.1" and found[2].process == "java"
    assert found[3] == Listener("tcp", "*", 8080, (7, 8), "airflow")
    assert found[4].address == "*" and found[5].address == "10.77.1.1" and found[5].port == 9092
    assert found[6] == Listener("udp", "192.0.2.2", 5353, (42,), "python3") and found[7].address == "::1"


def test_only_loopback_and_kafkaproofs_subnets_are_allowed():
    assert is_allowed("127.0.0.1") and is_allowed("127.0.0.2") and is_allowed("::1")
    assert is_allowed("10.77.3.5") and is_allowed("10.79.1.2")
    assert not is_allowed("*") and not is_allowed("192.0.2.2") and not is_allowed("10.78.0.1")
    assert not is_allowed("fd00::2") and not is_allowed("nonsense")


def test_only_our_processes_count():
    found = parse_ss(SS)
    assert [str(l) for l in exposed(found, {42, 10372})] == ["udp 192.0.2.2:5353 python3 pids [42]"]
    assert [l.port for l in exposed(found, {7})] == [8080]
    assert exposed(found, set()) == []


def test_our_processes_are_this_one_and_its_descendants():
    import os
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ours = our_pids([os.getpid()])
        assert os.getpid() in ours and child.pid in ours and 1 not in ours
    finally:
        child.kill()
        child.wait()


def test_proxies_before_an_existing_cluster_listen_where_told_and_never_on_a_wildcard():
    from kafkaproof.cluster.external import LOOPBACK, check_proxy_listen
    from kafkaproof.errors import ClusterError
    assert LOOPBACK == "127.0.0.1" and check_proxy_listen(" 192.0.2.10 ") == "192.0.2.10"
    for bad, why in (("0.0.0.0", "a wildcard"), ("::", "IPv4"), ("kafka-1", "give an IPv4 address")):
        with pytest.raises(ClusterError, match=why):
            check_proxy_listen(bad)

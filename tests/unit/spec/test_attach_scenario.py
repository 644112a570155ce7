"""A scenario on the user's own compose project (`cluster.attach`, or `run --attach-compose-project`): checked
before anything starts, naming the file and field; the override goes through the same checks."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafkaproof import cli
from kafkaproof.errors import KafkaproofError, ScenarioError
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import scenario as scenario_mod

BASE = {"name": "t-attach", "guarantee": "at-least-once", "producers": {"messages": 10},
        "faults": [{"at": 1, "kind": "kill", "target": "leader:0", "duration": 2},
                   {"at": 4, "kind": "kill", "target": "consumer:0"}]}


def write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


NETWORK_AND_PROXY = [{"at": 1, "kind": "isolate", "target": "leader:0", "duration": 1},
                     {"at": 3, "kind": "partition", "params": {"groups": "majority-minority"}, "duration": 1},
                     {"at": 5, "kind": "bandwidth", "target": "node:1", "params": {"rate_kbit": 800}, "duration": 1},
                     {"at": 7, "kind": "latency", "target": "leader:0", "params": {"ms": 100}, "duration": 1}]


def test_an_attaching_scenario_with_process_network_proxy_and_consumer_faults_is_valid(tmp_path):
    doc = {**BASE, "faults": BASE["faults"] + NETWORK_AND_PROXY}
    s = scenario_mod.load(write(tmp_path, {**doc, "cluster": {"backend": "compose", "attach": "shop_kafka"}}))
    assert s.data["cluster"]["attach"] == "shop_kafka"
    assert s.data["cluster"]["proxy"] is True  # implied by the latency fault: kafkaproof's proxies, allowed
    rolled = {**BASE, "cluster": {"backend": "compose", "attach": "shop_kafka"},
              "faults": BASE["faults"] + [{"at": 6, "kind": "rolling_restart"}]}  # in place: allowed
    assert scenario_mod.load(write(tmp_path, rolled)).data["faults"][-1]["kind"] == "rolling_restart"
    # the override: the same checks, the same result
    o = scenario_mod.load(write(tmp_path, doc)).with_overrides(attach="shop_kafka")
    assert o.data["cluster"] == {**s.data["cluster"]}


@pytest.mark.parametrize("cluster, fault, words", [
    ({"backend": "compose", "attach": "p", "clock": True},
     {"at": 1, "kind": "clock_skew", "target": "node:1", "params": {"offset_s": 60}, "duration": 1},
     ["s.yaml: faults[2].kind: 'clock_skew' (clock fault)", "process, network and proxy", "libfaketime"]),
    ({"backend": "compose", "attach": "p", "disk": True},
     {"at": 1, "kind": "disk_full", "target": "node:1", "duration": 1},
     ["faults[2].kind: 'disk_full' (disk fault)", "diskfs"]),
    ({"backend": "compose", "attach": "p"}, {"at": 1, "kind": "rolling_restart", "target": "all",
                                             "params": {"config": {"num.io.threads": 4}}},
     ["faults[2].kind: 'rolling_restart' (rolling fault)", "would recreate your service"]),
    ({"backend": "compose", "attach": "p"}, {"at": 1, "kind": "rolling_upgrade", "params": {"version": "4.3.1"}},
     ["faults[2].kind: 'rolling_upgrade' (rolling fault)", "rolling_restart without config"]),
    ({"attach": "p"}, None, ["s.yaml: cluster.backend: attach (p) needs backend: compose, not 'local'"]),
    ({"backend": "compose", "attach": "p", "image": "x:1"}, None, ["cluster.image: an attached compose project"]),
    ({"backend": "compose", "attach": "p", "config": {"a": 1}}, None, ["cluster.config: an attached"]),
    ({"backend": "compose", "attach": "P Q"}, None, ["cluster.attach"]),
])
def test_what_attaching_cannot_give_is_refused_naming_file_and_field(tmp_path, cluster, fault, words):
    doc = {**BASE, "cluster": cluster, "faults": BASE["faults"] + ([fault] if fault else [])}
    with pytest.raises(ScenarioError) as e:
        scenario_mod.load(write(tmp_path, doc))
    assert all(w in str(e.value) for w in words), str(e.value)


def test_container_services_of_an_application_are_refused_on_an_attached_project(tmp_path):
    from support import REPO
    s = scenario_mod.load(REPO / "scenarios" / "app-e6-wait-for-ack-compose.yaml")
    with pytest.raises(ScenarioError, match=r"application.services\[0\].image: container services on an attached"):
        s.with_overrides(attach="shop")


def test_the_override_goes_through_the_same_checks(tmp_path):
    doc = {**BASE, "faults": BASE["faults"] + [{"at": 1, "kind": "pause", "target": "leader:0", "duration": 1},
                                                {"at": 2, "kind": "clock_skew", "target": "node:1", "duration": 1,
                                                 "params": {"offset_s": 60}}]}
    s = scenario_mod.load(write(tmp_path, doc))
    with pytest.raises(ScenarioError, match=r"s.yaml \(with attach=p\): faults\[3\].kind: 'clock_skew' "
                                            r"\(clock fault\)"):
        resolve(s, Overrides(attach_project="p"))
    with pytest.raises(ScenarioError, match="cluster.config: an attached"):
        scenario_mod.load(write(tmp_path, {**BASE, "cluster": {"config": {"a": 1}}})).with_overrides(attach="p")


def test_the_cli_refuses_before_anything_starts(tmp_path, capsys):
    path = write(tmp_path, BASE)
    out = tmp_path / "runs"
    assert cli.main(["run", str(path), "--attach-compose-project", "p", "--out", str(out)]) == 2
    assert "--i-understand-faults-hit-this-cluster" in capsys.readouterr().err
    assert cli.main(["run", str(path), "--attach-compose-project", "p", "--bootstrap", "h:1", "--out", str(out)]) == 2
    assert "leave out --bootstrap" in capsys.readouterr().err
    assert cli.main(["cluster", "attach", "--compose-project", "p", "--name", "x"]) == 2
    assert "--i-understand-faults-hit-this-cluster" in capsys.readouterr().err
    assert cli.main(["cluster", "attach", "--compose-project", "p", "--name", "x", "--proxy-listen", "127.0.0.1",
                     "--i-understand-faults-hit-this-cluster"]) == 2
    assert "add --proxy" in capsys.readouterr().err
    assert not out.exists()
    assert isinstance(ScenarioError(""), KafkaproofError)

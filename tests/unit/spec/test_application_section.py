"""The scenario's `application` section (issue 39): parse_application, the scenario's checks and defaults."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import yaml

from kafkaproof.errors import ScenarioError
from kafkaproof.spec import fault_families
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.application import (ApplicationSection, DriveSection, Identity, ProcessedSection,
                                         RecordPointers, RequestTemplate, ServiceSection, check_application_host,
                                         parse_application)

pytestmark = pytest.mark.unit

WHERE = "s.yaml: application"


def section() -> dict:
    """A valid full section: two services, a drive on the first, processed seen over HTTP on the second."""
    return {
        "services": [
            {"name": "signup-service", "command": ["sh", "-c", "exec java -jar app.jar --port={port} ${HOME}"],
             "cwd": "app", "env": {"SPRING_KAFKA_BOOTSTRAP": "{bootstrap}", "WORKERS": 4}, "instances": 2,
             "ready": {"http": "http://127.0.0.1:{port}/actuator/health"}, "ready_timeout_s": 90},
            {"name": "signup-processor", "command": ["sh", "-c", "echo started {instance} {topic} {group}"],
             "ready": {"log": "Started .* in"}},
        ],
        "drive": {"service": "signup-service",
                  "request": {"method": "POST", "url": "http://127.0.0.1:{port}/signups",
                              "headers": {"Content-Type": "application/json"}, "body": '{"id": "{id}", "n": {seq}}'},
                  "rate": 50, "messages": 1000, "timeout_s": 2},
        "identity": {"json_pointer": "/id"},
        "processed": {"http": {"url": "http://127.0.0.1:{port}/processed", "service": "signup-processor",
                               "poll_s": 0.5, "pointer": "/ids"}},
    }


def parse(data: dict, base_dir: Path | None = Path("/scenarios")) -> ApplicationSection:
    return parse_application(data, WHERE, base_dir)


def test_a_valid_full_section_is_read_with_its_defaults():
    app = parse(section())
    assert app.services == (
        ServiceSection("signup-service", ("sh", "-c", "exec java -jar app.jar --port={port} ${HOME}"),
                       "/scenarios/app", {"SPRING_KAFKA_BOOTSTRAP": "{bootstrap}", "WORKERS": "4"}, 2,
                       "http://127.0.0.1:{port}/actuator/health", None, 90.0),
        ServiceSection("signup-processor", ("sh", "-c", "echo started {instance} {topic} {group}"), None, {}, 1,
                       None, "Started .* in", 60.0))
    assert app.drive == DriveSection("signup-service", RequestTemplate(
        "POST", "http://127.0.0.1:{port}/signups", {"Content-Type": "application/json"}, '{"id": "{id}", "n": {seq}}'),
        50.0, 1000, None, 2.0)
    assert app.identity == Identity("json_pointer", "/id")
    assert app.processed == ProcessedSection("http", url="http://127.0.0.1:{port}/processed",
                                             service="signup-processor", poll_s=0.5, pointer="/ids")
    assert app.targets() == ("app:signup-service", "app:signup-service:0", "app:signup-service:1",
                             "app:signup-processor", "app:signup-processor:0")


def test_defaults_of_an_optional_field_left_out():
    data = section()
    del data["processed"], data["drive"]["timeout_s"], data["drive"]["service"]
    data["drive"]["request"]["url"] = "http://127.0.0.1:8080/signups"
    data["drive"]["duration_s"] = 30
    app = parse(data)
    assert (app.drive.service, app.drive.timeout_s, app.drive.duration_s, app.processed) == ("", 5.0, 30.0, None)


def test_the_port_is_filled_in_before_each_request_is_rendered():
    template = parse(section()).drive.request.fill({"port": "8081"})
    run = {"bootstrap": "b:9092", "topic": "t", "group": "g", "run_id": "r"}
    assert template.render(run, "e-7", 7).url == "http://127.0.0.1:8081/signups"
    assert template.render(run, "e-7", 7).body == '{"id": "e-7", "n": 7}'


def test_an_http_list_is_read_as_counts_unless_its_mode_says_log_or_distinct():
    data = section()
    assert parse(data).processed.mode == "counts"
    data["processed"]["http"]["mode"] = "log"
    assert parse(data).processed.mode == "log"


def test_processed_from_a_topic_takes_the_application_identity_unless_given_and_postgres_its_query():
    data = section()
    data["processed"] = {"topic": {"name": "signups-processed"}}
    assert parse(data).processed == ProcessedSection("topic", topic="signups-processed",
                                                     identity=Identity("json_pointer", "/id"))
    data["processed"] = {"topic": {"name": "signups-processed", "identity": {"key": True}}}
    assert parse(data).processed.identity == Identity("key")
    data["processed"] = {"postgres": {"dsn": "postgresql://localhost/app", "query": "select id from processed"}}
    assert parse(data).processed == ProcessedSection("postgres", dsn="postgresql://localhost/app",
                                                     query="select id from processed")


def test_processed_http_records_with_positions_make_offsets_known():
    data = section()
    data["processed"]["http"]["records"] = {"id": "/id", "partition": "/partition", "offset": "/offset",
                                            "topic": "/topic", "time_ms": "/processedAtMs"}
    processed = parse(data).processed
    assert processed.records == RecordPointers("/id", "/partition", "/offset", "/topic", "/processedAtMs")
    assert processed.read_offsets and processed.records.as_dict()["time_ms"] == "/processedAtMs"
    data["processed"]["http"]["records"] = {"id": "/signup/id", "time_ms": "/at"}  # objects, no positions
    processed = parse(data).processed
    assert processed.records == RecordPointers("/signup/id", time_ms="/at") and not processed.read_offsets
    del data["processed"]["http"]["records"]
    assert parse(data).processed.records is None and not parse(data).processed.read_offsets


def _set(path: str, value):
    """A change to the valid section: `path` a dotted path (list indexes as numbers), value None deletes."""
    def change(data: dict) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = data
        for p in parents:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return change


@pytest.mark.parametrize("change, message", [
    (_set("services", []), "application.services: must be a non-empty list"),
    (_set("drive", None), "application.drive: required"),
    (_set("identity", None), "application.identity: required"),
    (_set("extra", 1), "application.extra: not a field here; allowed: services, drive, identity, processed"),
    (_set("services.0.name", "Signup_Service"), "application.services[0].name: 'Signup_Service' is not a service name"),
    (_set("services.1.name", "signup-service"),
     "application.services[1].name: 'signup-service' is already the name of services[0]; service names must be unique"),
    (_set("services.0.command", []), "application.services[0].command: must be a non-empty list of non-empty strings"),
    (_set("services.0.command", "java -jar app.jar"), "application.services[0].command: must be a non-empty list"),
    (_set("services.0.command", ["java", 8080]), "application.services[0].command: must be a non-empty list"),
    (_set("services.0.command", ["java", "--port={prot}"]),
     r"application.services[0].command[1]: unknown placeholder {prot}; allowed: {bootstrap}, {topic}, {group}, "
     r"{run_id}, {instance}, {port}"),
    (_set("services.0.env", {"A": "{id}"}), "application.services[0].env.A: unknown placeholder {id}"),
    (_set("services.0.env", {"A": True}), "application.services[0].env.A: must be a string or a number"),
    (_set("services.0.instances", 0), "application.services[0].instances: must be an integer 1..8; got 0"),
    (_set("services.0.instances", 9), "application.services[0].instances: must be an integer 1..8; got 9"),
    (_set("services.0.ready", {"http": "http://x/", "log": "up"}),
     "application.services[0].ready: must be a mapping with exactly one of http, log"),
    (_set("services.0.ready", {"tcp": 8080}), "application.services[0].ready: must be a mapping with exactly one of"),
    (_set("services.0.ready", None), "application.services[0].ready: required"),
    (_set("services.0.ready", {"http": "127.0.0.1:{port}/health"}),
     "application.services[0].ready.http: '127.0.0.1:{port}/health' must start with http:// or https://"),
    (_set("services.1.ready", {"log": "Started ("}), "application.services[1].ready.log: 'Started (' is not a regular"),
    (_set("services.0.ready_timeout_s", 0), "application.services[0].ready_timeout_s: must be a number > 0; got 0"),
    (_set("services.0.cwd", ""), "application.services[0].cwd: must be a directory path"),
    (_set("drive.rate", 0), "application.drive.rate: must be a number > 0; got 0"),
    (_set("drive.rate", None), "application.drive.rate: required"),
    (_set("drive.messages", None), "application.drive: give messages or duration_s (or both)"),
    (_set("drive.messages", 0), "application.drive.messages: must be an integer >= 1; got 0"),
    (_set("drive.duration_s", -1), "application.drive.duration_s: must be a number > 0; got -1"),
    (_set("drive.timeout_s", 0), "application.drive.timeout_s: must be a number > 0; got 0"),
    (_set("drive.service", "billing"),
     "application.drive.service: 'billing' is not a service of application.services; allowed: signup-service, "
     "signup-processor"),
    (_set("drive.service", None),
     "application.drive.request.url: {port} needs application.drive.service, the service whose instance-0 port it is"),
    (_set("drive.request.body", '{"id": "{event_id}"}'), "application.drive.request.body: unknown placeholder {event_id}"),
    (_set("drive.request.headers", {"X-Port": "{port}"}), "application.drive.request.headers.X-Port: unknown placeholder {port}"),
    (_set("identity", {"jsonpath": "$.id"}), "application.identity.jsonpath: not an identity"),
    (_set("processed", {"http": {"url": "http://x/"}, "topic": {"name": "t"}}),
     "application.processed: must be a mapping with exactly one of http, topic, postgres"),
    (_set("processed.http.service", "billing"), "application.processed.http.service: 'billing' is not a service"),
    (_set("processed.http.service", None),
     "application.processed.http.url: {port} needs application.processed.http.service"),
    (_set("processed.http.url", "http://127.0.0.1:{port}/p/{id}"), "application.processed.http.url: unknown placeholder {id}"),
    (_set("processed.http.pointer", "ids"), "application.processed.http.pointer: 'ids' is not an RFC 6901 JSON pointer"),
    (_set("processed.http.poll_s", 0), "application.processed.http.poll_s: must be a number > 0"),
    (_set("processed.http.records", ["/id"]), "application.processed.http.records: must be a mapping with id, "
                                              "partition, offset, topic, time_ms"),
    (_set("processed.http.records", {"partition": "/p", "offset": "/o"}),
     "application.processed.http.records.id: required"),
    (_set("processed.http.records", {"id": "id"}),
     "application.processed.http.records.id: 'id' is not an RFC 6901 JSON pointer"),
    (_set("processed.http.records", {"id": ""}),
     "application.processed.http.records.id: must be a JSON pointer into each listed object, e.g. /id"),
    (_set("processed.http.records", {"id": "/id", "offset": 3}),
     "application.processed.http.records.offset: must be a JSON pointer"),
    (_set("processed.http.records", {"id": "/id", "partition": "/partition"}),
     "application.processed.http.records.offset: required with partition"),
    (_set("processed.http.records", {"id": "/id", "offset": "/offset"}),
     "application.processed.http.records.partition: required with offset"),
    (_set("processed.http.records", {"id": "/id", "topic": "/topic"}),
     "application.processed.http.records.topic: only with partition and offset"),
    (_set("processed.http.records", {"id": "/id", "time": "/at"}),
     "application.processed.http.records.time: not a field here; allowed: id, partition, offset, topic, time_ms"),
    (_set("processed.http.mode", "append"), "application.processed.http.mode: 'append' is not a mode; allowed: "
                                            "counts, log, distinct"),
    (_set("processed", {"topic": {"name": "a b"}}), "application.processed.topic.name: 'a b' is not a topic name"),
    (_set("processed", {"topic": {}}), "application.processed.topic.name: required"),
    (_set("processed", {"postgres": {"dsn": "postgresql://x", "query": " "}}),
     "application.processed.postgres.query: must be a non-empty string"),
    (_set("services.0.ready", {"http": "http://127.0.0.1:18080/health"}),
     "application.services[0].ready.http: the fixed port 18080 with instances: 2: every instance would bind the "
     "same port; write {port}"),
    (lambda d: (d["services"][0].update(instances=1, ready={"http": "http://127.0.0.1:18080/a"}),
                d["services"][1].update(ready={"http": "http://localhost:18080/b"})),
     "application.services[1].ready.http: port 18080 is also services[0]'s fixed port"),
])
def test_every_refusal_names_the_field_and_what_is_allowed(change, message):
    data = section()
    change(data)
    with pytest.raises(ScenarioError) as e:
        parse(data)
    assert str(e.value).startswith("s.yaml: ") and message in str(e.value)


# --- the host: directories and commands, before anything starts -------------------------------------

def _host_section(tmp_path: Path, command: list[str], cwd: str | None = "app", env: dict | None = None):
    data = section()
    data["services"][0].update(command=command, env=env or {})
    if cwd is None:
        del data["services"][0]["cwd"]
    else:
        data["services"][0]["cwd"] = cwd
    return parse(data, tmp_path)


def test_the_host_check_finds_commands_on_path_and_relative_to_the_cwd(tmp_path):
    (tmp_path / "app").mkdir()
    script = tmp_path / "app" / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    check_application_host(_host_section(tmp_path, ["sh", "-c", "true"]), WHERE)
    check_application_host(_host_section(tmp_path, ["./run.sh"]), WHERE)
    check_application_host(_host_section(tmp_path, [str(script)], cwd=None), WHERE)
    check_application_host(_host_section(tmp_path, ["run.sh"], env={"PATH": str(tmp_path / "app")}), WHERE)


@pytest.mark.parametrize("command, cwd, message", [
    (["sh"], "missing", "application.services[0].cwd: {tmp}/missing is not a directory"),
    (["no-such-program-kp39"], "app", "application.services[0].command[0]: 'no-such-program-kp39' is not found on PATH"),
    (["./missing.sh"], "app", "application.services[0].command[0]: './missing.sh' is not an executable file"),
    (["./data.txt"], "app", "application.services[0].command[0]: './data.txt' is not an executable file"),
])
def test_a_missing_directory_or_command_is_refused(tmp_path, command, cwd, message):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "data.txt").write_text("not a program")
    with pytest.raises(ScenarioError, match=None) as e:
        check_application_host(_host_section(tmp_path, command, cwd), WHERE)
    assert message.format(tmp=tmp_path) in str(e.value)


# --- in a scenario ---------------------------------------------------------------------------------

def _doc(**extra) -> dict:
    data = section()
    data["services"][0].update(cwd=".", command=["sh", "-c", "true"])
    return {"name": "app", "guarantee": "at-least-once", "application": data, **extra}


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_scenario_with_an_application_needs_no_producers_and_runs_none_of_its_own(tmp_path):
    s = scenario_mod.load(_write(tmp_path, _doc()))
    assert s.data["producers"]["count"] == 0
    assert s.application == parse(s.data["application"], tmp_path)
    assert s.application.services[0].cwd == str(tmp_path)
    assert Path(s.application.services[0].cwd).is_absolute()


def test_the_application_round_trips_via_json_and_is_covered_by_the_hash(tmp_path):
    s = scenario_mod.load(_write(tmp_path, _doc()))
    back = scenario_mod.Scenario.from_json(json.loads(json.dumps(s.to_json())))
    assert back.application == s.application and back.hash() == s.hash()
    changed = copy.deepcopy(s.data)
    changed["application"]["drive"]["rate"] = 51
    assert scenario_mod.Scenario(s.name, s.path, changed).hash() != s.hash()
    plain = scenario_mod.Scenario("p", "p.yaml", scenario_mod.validate_document(
        {"name": "p", "guarantee": "at-least-once", "producers": {"messages": 5}}, "p.yaml"))
    assert plain.application is None


def test_the_schema_and_its_published_copy_include_the_section():
    schema = json.loads(scenario_mod.schema_json())
    assert schema["properties"]["application"]["required"] == ["services", "drive", "identity"]
    assert "producers" not in schema["required"]
    assert {"required": ["application"]} in schema["anyOf"]


@pytest.mark.parametrize("doc, message", [
    ({"name": "x", "guarantee": "at-least-once"},
     "(top level): 'producers' is required (kafkaproof's producers), unless the scenario has an `application` section"),
    (_doc(producers={"messages": 5}), "producers: an application scenario's events come from the application"),
    (_doc(application={"services": []}), "application.services: [] should be non-empty"),
    (_doc(application={**section(), "drive": {**section()["drive"], "rate": "fast"}}),
     "application.drive.rate: 'fast' is not of type 'number'"),
])
def test_the_scenario_refuses_a_section_that_does_not_fit(doc, message):
    with pytest.raises(ScenarioError) as e:
        scenario_mod.validate_document(doc, "s.yaml")
    assert message in str(e.value)


def test_a_scenario_looks_up_the_commands_before_anything_starts(tmp_path):
    doc = _doc()
    doc["application"]["services"][1]["command"] = ["no-such-program-kp39"]
    with pytest.raises(ScenarioError, match=r"app.yaml: application.services\[1\].command\[0\]: 'no-such-program-kp39' "
                                            r"is not found on PATH"):
        scenario_mod.load(_write(tmp_path, doc))
    doc = _doc()
    doc["application"]["services"][0]["cwd"] = "../nowhere-kp39"
    with pytest.raises(ScenarioError, match=r"application.services\[0\].cwd: .*nowhere-kp39 is not a directory"):
        scenario_mod.load(_write(tmp_path, doc))


@pytest.mark.parametrize("target, message", [
    ("app:billing", "faults[0].target: 'app:billing' is not a service or instance of the application; allowed: "
                    "app:signup-service, app:signup-service:0, app:signup-service:1, app:signup-processor, "
                    "app:signup-processor:0"),
    ("app:signup-service:2", "faults[0].target: 'app:signup-service:2' is not a service or instance"),
    ("app:signup-processor:x", "faults[0].target: 'app:signup-processor:x' is not a service or instance"),
])
def test_an_app_fault_must_name_a_declared_service_and_instance(target, message):
    doc = _doc(faults=[{"at": 1, "kind": "kill", "target": target}])
    with pytest.raises(ScenarioError) as e:
        scenario_mod.validate_document(doc, "s.yaml", Path(os.getcwd()))
    assert message in str(e.value)


def test_an_app_fault_needs_an_application():
    doc = {"name": "x", "guarantee": "at-least-once", "producers": {"messages": 5},
           "faults": [{"at": 1, "kind": "kill", "target": "app:signup-service"}]}
    with pytest.raises(ScenarioError, match="faults\\[0\\].target: 'app:signup-service': app: targets need an "
                                            "application section"):
        scenario_mod.validate_document(doc, "s.yaml")


APP_FAMILY = fault_families.FAMILIES["app"]


def test_an_app_fault_on_a_declared_instance_is_accepted():
    kind = next(iter(APP_FAMILY.kinds))
    for target in ("app:signup-service", "app:signup-service:1", "app:signup-processor:0"):
        scenario_mod.validate_document(_doc(faults=[{"at": 1, "kind": kind, "target": target}]), "s.yaml")


def test_overrides_and_random_schedules_use_the_drive():
    data = scenario_mod.validate_document(_doc(faults={"random": {
        "kinds": [{"kind": "kill"}], "seed": 3, "interval_s": [1, 2], "duration_s": [1, 1]}}), "s.yaml")
    s = scenario_mod.Scenario("app", "s.yaml", data)
    assert s.with_overrides(messages=10).data["application"]["drive"]["messages"] == 10
    drawn = s.with_random_schedule()
    # the drive's 1000 messages at 50/s last 20 s (the producers' defaults, 10 s, play no part)
    assert 10 < max(f["at"] for f in drawn.data["faults"]) <= 1000 / 50


def test_the_documented_example_is_a_valid_section():
    text = (Path(__file__).resolve().parents[3] / "docs" / "application.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    app = parse(yaml.safe_load(block)["application"], Path("/repo/scenarios"))
    assert [s.cwd for s in app.services] == ["/repo/examples/signup-app"] * 2 and app.drive.service == "signup-service"


# --- image services (the compose backend) -------------------------------------------------------------

def _image_section(**service) -> dict:
    data = section()
    data["services"] = [{"name": "signup-service", "image": "{example_app}", "port": 8080,
                         "ready": {"http": "http://127.0.0.1:{port}/actuator/health"}, **service},
                        {"name": "signup-processor", "image": "team/processor:1.4", "port": 8081,
                         "command": ["java", "-jar", "/app/p.jar", "--server.port={port}"],
                         "ready": {"log": "Started .* in"}}]
    return data


def test_an_image_service_is_read_with_its_port_and_an_optional_command():
    app = parse(_image_section(env={"BOOTSTRAP": "{bootstrap}"}))
    first, second = app.services
    assert (first.image, first.port, first.argv, first.cwd, first.env) == ("{example_app}", 8080, (), None,
                                                                           {"BOOTSTRAP": "{bootstrap}"})
    assert (second.image, second.port, second.argv[-1]) == ("team/processor:1.4", 8081, "--server.port={port}")


@pytest.mark.parametrize("service, message", [
    ({"image": "Not An Image"}, "application.services[0].image: 'Not An Image' is not an image reference; allowed: "
                                "a local image such as my-team/signup:1.4, or {example_app}"),
    ({"port": None}, "application.services[0].port: required with image: the port the service listens on inside"),
    ({"port": 70000}, "application.services[0].port: must be an integer 1..65535; got 70000"),
    ({"cwd": "app"}, "application.services[0].cwd: a container service runs in its container's working directory"),
    ({"compose_service": {"file": "c.yml", "service": "s"}},
     "application.services[0].compose_service: give image or compose_service, not both"),
    ({"command": ["java", "-jar", "{example_app:signup-service}"]},
     "application.services[0].command[2]: {example_app:<service>} is a jar on this host; in the container of image "
     "{example_app} the jars are /app/<service>.jar"),
    ({"image": None, "port": None}, "application.services[0]: give command (a process on this host) or, with "
                                    "cluster.backend: compose, image (a container)"),
])
def test_an_image_service_is_refused_naming_the_field(service, message):
    data = _image_section(**{k: v for k, v in service.items() if v is not None})
    for key in [k for k, v in service.items() if v is None]:
        del data["services"][0][key]
    with pytest.raises(ScenarioError) as e:
        parse(data)
    assert message in str(e.value)


def test_a_command_service_takes_no_port_and_services_are_all_images_or_all_commands():
    data = section()
    data["services"][1]["port"] = 8080
    with pytest.raises(ScenarioError, match=r"services\[1\].port: only a container service takes it"):
        parse(data)
    data = _image_section()
    data["services"][1] = section()["services"][1]
    with pytest.raises(ScenarioError, match=r"services\[0\].image: mixing container and command services"):
        parse(data)


@pytest.mark.parametrize("cluster, message", [
    ({}, "application.services[0].image: a container service needs cluster.backend: compose (the local backend runs "
         "services as processes on this host: give command instead)"),
    ({"backend": "compose", "proxy": True}, "application.services[0].image: containers reach the brokers inside the "
                                            "cluster's network, which the fault proxy"),
])
def test_an_image_service_needs_the_compose_backend_without_the_proxy_before_anything_starts(tmp_path, cluster, message):
    doc = {"name": "app", "guarantee": "at-least-once", "application": _image_section(), "cluster": cluster}
    with pytest.raises(ScenarioError) as e:
        scenario_mod.load(_write(tmp_path, doc))
    assert message in str(e.value)
    doc["cluster"] = {"backend": "compose"}
    assert scenario_mod.load(_write(tmp_path, doc)).application.services[0].image == "{example_app}"


def test_a_fixed_readiness_port_already_in_use_is_refused_before_anything_starts(tmp_path):
    import socket
    (tmp_path / "app").mkdir()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        data = section()
        data["services"][0].update(instances=1, cwd="app", ready={"http": f"http://127.0.0.1:{port}/health"})
        with pytest.raises(ScenarioError) as e:
            check_application_host(parse(data, tmp_path), WHERE)
        assert f"application.services[0].ready.http: port {port} on 127.0.0.1 is already in use" in str(e.value)
    check_application_host(parse(data, tmp_path), WHERE)  # free again: accepted

"""A service of the user's compose file as an application service (issue 39): spec/compose_service.py reads
and checks its definition as Docker Compose would, and lays it under the scenario's service."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kafkaproof.errors import ScenarioError
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.application import check_application_host, parse_application
from kafkaproof.spec.compose_service import (ComposeBuild, ComposeRef, apply_compose, container_port, interpolate,
                                             load_compose_service, parse_compose_ref, parse_env_text, read_service)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "signup-app" / "docker-compose.yml"
WHERE = "s.yaml: application.services[0]"
REF = ComposeRef("/team/deploy/docker-compose.yml", "signup")


def read(service: dict, variables: dict | None = None, files: dict | None = None):
    """`read_service` of a document with `service` as `signup`; env files from `files` (absolute path -> text)."""
    def reader(path: str) -> str:
        if path not in (files or {}):
            raise FileNotFoundError(2, "No such file or directory")
        return files[path]
    return read_service({"services": {"signup": service, "db": {"image": "postgres"}}}, REF, variables or {},
                        reader, WHERE)


def test_a_reference_is_a_file_relative_to_the_scenario_and_a_service():
    assert parse_compose_ref({"file": "../deploy/compose.yml", "service": "signup"}, WHERE,
                             Path("/team/scenarios")) == ComposeRef("/team/deploy/compose.yml", "signup")


@pytest.mark.parametrize("data, message", [
    ("signup", "s.yaml: application.services[0]: must be a mapping with file (a compose file, relative to the "
               "scenario file) and service"),
    ({"file": "c.yml"}, "must be a mapping with file"),
    ({"file": "c.yml", "service": "s", "project": "p"}, "must be a mapping with file"),
    ({"file": "", "service": "s"}, "s.yaml: application.services[0].file: must be a non-empty string; got ''"),
])
def test_a_malformed_reference_is_refused_naming_the_field(data, message):
    with pytest.raises(ScenarioError, match=None) as e:
        parse_compose_ref(data, WHERE, None)
    assert message in str(e.value)


def test_compose_variables_are_substituted_as_compose_does():
    variables = {"TAG": "1.4", "EMPTY": ""}
    assert interpolate("team/signup:${TAG}", variables, "w") == "team/signup:1.4"
    assert interpolate("$TAG-${MISSING:-dev}-${EMPTY:-e}-${EMPTY-e}", variables, "w") == "1.4-dev-e-"
    assert interpolate("${TAG:+set}${MISSING:+set}", variables, "w") == "set"
    assert interpolate("cost: $$5 {bootstrap} ${MISSING:-${TAG}}", variables, "w") == "cost: $5 {bootstrap} 1.4"
    with pytest.raises(ScenarioError, match="w: variable MISSING is not set: give it"):
        interpolate("${MISSING:?give it}", variables, "w")
    with pytest.raises(ScenarioError, match=r"invalid interpolation in '\$\{1\}'"):
        interpolate("${1}", variables, "w")


def test_an_env_file_is_read_with_comments_quotes_and_export():
    text = "# settings\n\nA=1\nexport B = two words \nC='quoted # not a comment'\nD=x # comment\nHOME\nUNSET\n"
    assert parse_env_text(text, {"HOME": "/root"}) == {"A": "1", "B": "two words", "C": "quoted # not a comment",
                                                       "D": "x", "HOME": "/root"}


@pytest.mark.parametrize("entry, port", [(8080, 8080), ("8080", 8080), ("9000:8080", 8080),
                                         ("127.0.0.1:9000:8080/tcp", 8080), ({"target": 8081, "published": 80}, 8081)])
def test_the_container_port_of_a_ports_entry(entry, port):
    assert container_port(entry, "w") == port


def test_a_port_range_cannot_be_the_service_port():
    with pytest.raises(ScenarioError, match="w: '8000-8010:8000-8010' is not a single container port"):
        container_port("8000-8010:8000-8010", "w")


def test_a_build_service_is_read_with_its_command_environment_and_port():
    service = read({
        "build": {"context": "..", "dockerfile": "docker/Dockerfile", "args": ["JAR=${JAR:-app.jar}", "FROM_ENV"]},
        "command": "java -jar '/app/my app.jar'", "entrypoint": ["tini", "--"], "working_dir": "/app", "user": 1000,
        "env_file": ["common.env", {"path": "local.env", "required": False}],
        "environment": ["SERVER_PORT=8080", "SHARED=from-environment", "FROM_ENV"],
        "ports": ["127.0.0.1:9000:8080"], "expose": [9090],
        "healthcheck": {"test": ["CMD", "true"]}, "depends_on": ["kafka"], "x-team": "ours"},
        variables={"FROM_ENV": "shell"}, files={"/team/deploy/common.env": "SHARED=from-file\nONLY_FILE=1\n"})
    assert service.build == ComposeBuild("/team", "/team/docker/Dockerfile", {"JAR": "app.jar", "FROM_ENV": "shell"})
    assert service.image is None and service.command == ("java", "-jar", "/app/my app.jar")
    assert service.entrypoint == ("tini", "--") and (service.working_dir, service.user) == ("/app", "1000")
    assert service.environment == {"SHARED": "from-environment", "ONLY_FILE": "1", "SERVER_PORT": "8080",
                                   "FROM_ENV": "shell"}
    assert service.ports == (8080, 9090)
    assert service.notes == ("healthcheck ignored: kafkaproof checks readiness with the scenario's ready:",
                             "depends_on ignored: kafkaproof starts the cluster first, then the services")
    assert service.source()["build"]["context"] == "/team"


@pytest.mark.parametrize("service, message", [
    ({"image": "a", "volumes": ["./data:/data"]},
     f"{WHERE}: /team/deploy/docker-compose.yml: services.signup.volumes: not supported: kafkaproof runs the "
     f"service as its own container and cannot honour volumes; supported: image, build"),
    ({"image": "a", "network_mode": "host"}, "services.signup.network_mode: not supported"),
    ({"command": ["java"]}, "services.signup: has neither image nor build; kafkaproof needs one of them"),
    ({"build": {"context": "https://github.com/team/app.git"}},
     "services.signup.build.context: must be a local directory (relative to the compose file)"),
    ({"build": {"context": ".", "network": "host"}}, "services.signup.build.network: not supported by kafkaproof"),
    ({"image": "a", "environment": {"DEBUG": True}},
     "services.signup.environment.DEBUG: must be a string or a number (quote true/false); got True"),
    ({"image": "a", "env_file": "missing.env"},
     "services.signup.env_file[0]: cannot read /team/deploy/missing.env: No such file or directory"),
    ({"image": "a", "ports": ["8000-8010:8000-8010"]}, "services.signup.ports[0]: '8000-8010:8000-8010' is not a "
                                                       "single container port"),
    ({"image": "a", "command": 7}, "services.signup.command: must be a string or a list of strings; got 7"),
    ({"image": "${IMAGE:?set IMAGE to the image under test}"},
     "services.signup.image: variable IMAGE is not set: set IMAGE to the image under test"),
])
def test_what_cannot_be_honoured_is_refused_naming_the_file_and_the_field(service, message):
    with pytest.raises(ScenarioError) as e:
        read(service)
    assert message in str(e.value)


def test_a_service_not_in_the_file_is_refused_listing_its_services():
    with pytest.raises(ScenarioError) as e:
        read_service({"services": {"kafka": {}, "api": {}}}, REF, {}, str, WHERE)
    assert str(e.value) == (f"{WHERE}.service: 'signup' is not a service of /team/deploy/docker-compose.yml; "
                            f"its services: kafka, api")
    with pytest.raises(ScenarioError, match="not a compose file: it has no services mapping"):
        read_service(["not", "compose"], REF, {}, str, WHERE)


def _scenario_service(**extra) -> dict:
    return {"name": "signup-service", "compose_service": {"file": "deploy/docker-compose.yml", "service": "signup"},
            "ready": {"http": "http://127.0.0.1:{port}/health"}, **extra}


def _section(service: dict) -> dict:
    return {"services": [service], "drive": {"service": "signup-service",
                                             "request": {"url": "http://127.0.0.1:{port}/signups"}, "rate": 1,
                                             "messages": 1},
            "identity": {"key": True}}


def test_the_scenario_command_env_and_port_win_over_the_compose_definition():
    spec = parse_application(_section(_scenario_service(env={"SHARED": "{bootstrap}"}, port=9000)), "s: application",
                             Path("/team")).services[0]
    assert spec.compose == ComposeRef("/team/deploy/docker-compose.yml", "signup") and spec.container
    definition = read({"image": "team/signup:1", "command": ["java", "-jar", "a.jar"], "entrypoint": "",
                       "environment": {"SHARED": "x", "OTHER": "y"}, "ports": ["8080:8080"], "working_dir": "/srv"})
    applied = apply_compose(spec, definition, WHERE)
    assert (applied.argv, applied.port, applied.entrypoint, applied.workdir) == (("java", "-jar", "a.jar"), 9000, (),
                                                                                  "/srv")
    assert applied.env == {"SHARED": "{bootstrap}", "OTHER": "y"}
    plain = parse_application(_section(_scenario_service(command=["sh", "-c", "run"])), "s: application",
                              Path("/team")).services[0]
    assert apply_compose(plain, definition, WHERE).argv == ("sh", "-c", "run")
    assert apply_compose(plain, definition, WHERE).port == 8080
    with pytest.raises(ScenarioError, match=r"s.yaml: application.services\[0\].port: required: services.signup of "
                                            r"/team/deploy/docker-compose.yml has no ports"):
        apply_compose(plain, read({"image": "a"}), WHERE)


def test_a_scenario_with_a_missing_file_or_build_context_is_refused_before_anything_starts(tmp_path):
    doc = {"name": "app", "guarantee": "at-least-once", "cluster": {"backend": "compose"},
           "application": _section(_scenario_service())}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError) as e:
        scenario_mod.load(path)
    assert str(e.value) == (f"{path}: application.services[0].compose_service.file: {tmp_path}/deploy/docker-compose.yml "
                            f"is not a file (a relative path starts at the scenario file's directory)")
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "docker-compose.yml").write_text("services:\n  signup:\n    build: ../app\n"
                                                            "    ports: ['8080:8080']\n")
    with pytest.raises(ScenarioError, match=r"services.signup.build.context: .*/app is not a directory"):
        scenario_mod.load(path)
    (tmp_path / "app").mkdir()
    with pytest.raises(ScenarioError, match=r"services.signup.build.dockerfile: .*/app/Dockerfile is not a file"):
        scenario_mod.load(path)
    (tmp_path / "app" / "Dockerfile").write_text("FROM kafkaproof/base:bookworm\n")
    assert scenario_mod.load(path).application.services[0].compose.service == "signup"
    doc["cluster"] = {}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match=r"application.services\[0\].compose_service: a container service needs "
                                            r"cluster.backend: compose"):
        scenario_mod.load(path)


def test_the_example_compose_file_gives_the_example_services(tmp_path):
    for name in ("docker-compose.yml", "Dockerfile", "signup-service.env"):
        shutil.copy(EXAMPLE.parent / name, tmp_path / name)
    signup = load_compose_service(ComposeRef(str(tmp_path / "docker-compose.yml"), "signup-service"), WHERE,
                                  environ={"SIGNUP_ANSWER": "after-ack"})
    assert signup.build == ComposeBuild(str(tmp_path), str(tmp_path / "Dockerfile"), {"SERVICE": "signup-service"})
    assert signup.command[-2:] == ("-jar", "/app/signup-service.jar") and signup.ports == (8080,)
    assert signup.environment["SIGNUP_ANSWER"] == "after-ack"
    assert signup.environment["SPRING_KAFKA_PRODUCER_PROPERTIES_DELIVERY_TIMEOUT_MS"] == "6000"  # its env_file
    (tmp_path / ".env").write_text("SIGNUP_ANSWER=from-dotenv\n")
    ref = ComposeRef(str(tmp_path / "docker-compose.yml"), "signup-service")
    assert load_compose_service(ref, WHERE, environ={}).environment["SIGNUP_ANSWER"] == "from-dotenv"
    processor = load_compose_service(ComposeRef(ref.file, "signup-processor"), WHERE, environ={})
    assert processor.ports == (8081,) and processor.build.args == {"SERVICE": "signup-processor"}


def test_check_application_host_reads_the_compose_service(tmp_path):
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "docker-compose.yml").write_text("services:\n  signup:\n    image: a\n"
                                                            "    volumes: ['./x:/x']\n")
    app = parse_application(_section(_scenario_service()), "s.yaml: application", tmp_path)
    with pytest.raises(ScenarioError, match=r"s.yaml: application.services\[0\].compose_service: .*/deploy/"
                                            r"docker-compose.yml: services.signup.volumes: not supported"):
        check_application_host(app, "s.yaml: application")

"""docker-compose.yml against cluster mode, without a container engine. The file is loaded by
compose-go, the library Docker Compose is built on (tools/compose-check, built here with Go from
the Go module proxy), with .env.example as its env file. Then each service is compared with what
`make cluster` runs: the same script in its `run` mode, asked with `--print` for the command and
configuration it would run (nothing is started), once with the service's environment and once
with cluster mode's (the profile of `scripts/cluster.sh env`). The two may differ only where a
container needs it: the services' names for 127.0.0.1, bind addresses, and the secrets of .env.
A broken file is refused with the parser's own message."""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import ROOT, VENV_BIN, parse_exports

TOOL = ROOT / "tools" / "compose-check"
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_FILE = ROOT / ".env.example"
PROJECT_DIR = "/opt/streamcore"
AIRFLOW_COMPONENTS = ("init", "api-server", "scheduler", "dag-processor", "triggerer")
# The variables a container needs and loopback does not: bind addresses, host names, secrets.
# The tests below check each one's value.
CONTAINER_ONLY = {
    "STREAMCORE_KAFKA_HOST",
    "STREAMCORE_KAFKA_ADVERTISED_HOST",
    "STREAMCORE_SPARK_HOST",
    "STREAMCORE_SPARK_MASTER_HOST",
    "STREAMCORE_AIRFLOW_PASSWORD",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__API__HOST",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
}


def go_command() -> str:
    found = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if found is None:
        pytest.fail(
            "no `go` on PATH nor in /usr/local/go/bin: tools/compose-check (the compose-go "
            "loader that validates docker-compose.yml) needs Go 1.24+; install it from "
            "https://go.dev/dl/ and put its bin/ on PATH"
        )
    return found


@pytest.fixture(scope="module")
def compose_check() -> Path:
    """The compose-check binary, built once per change of its sources into .cache/."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((TOOL / name).read_bytes())
    binary = ROOT / ".cache" / "compose-check" / digest.hexdigest()[:16] / "compose-check"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(f"compose-check.{os.getpid()}")
        built = subprocess.run(
            [go_command(), "build", "-mod=readonly", "-buildvcs=false", "-o", str(partial), "."],
            cwd=TOOL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, f"go build of tools/compose-check failed:\n{built.stderr}"
        # Parallel sessions may build at once: the rename makes one of them win whole.
        partial.replace(binary)
    return binary


def load(binary: Path, compose_file: Path, env_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), str(compose_file), str(env_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def project(compose_check: Path) -> dict[str, Any]:
    done = load(compose_check, COMPOSE_FILE, ENV_FILE)
    assert done.returncode == 0, f"compose-go refuses docker-compose.yml:\n{done.stderr}"
    return json.loads(done.stdout)


def script_env(variables: dict[str, str]) -> dict[str, str]:
    """This environment without anything that configures the scripts, plus `variables`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMCORE_", "AIRFLOW_"))}
    return {**base, **variables}


def run(command: list[str], variables: dict[str, str]) -> str:
    done = subprocess.run(
        command, cwd=ROOT, env=script_env(variables), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def profile() -> dict[str, str]:
    """Cluster mode's variables, as scripts/cluster.sh exports them to the scripts it runs."""
    return parse_exports(run([str(ROOT / "scripts" / "cluster.sh"), "env"], {}))


def published(project: dict[str, Any]) -> dict[int, str]:
    """Each published port and the service publishing it."""
    return {
        port["target"]: name
        for name, service in project["services"].items()
        for port in service.get("ports", [])
    }


def in_container(value: str, project: dict[str, Any]) -> str:
    """A cluster-mode value as a container sees it: the project mounted at PROJECT_DIR, and each
    service reached by its name where cluster mode reaches it on 127.0.0.1."""
    value = value.replace(str(ROOT), PROJECT_DIR)
    for port, service in published(project).items():
        value = value.replace(f"127.0.0.1:{port}", f"{service}:{port}")
    return value


def without_password(url: str) -> str:
    return re.sub(r"//([^:@/]+):[^@/]*@", r"//\1@", url)


def password(url: str) -> str:
    found = re.search(r"//[^:@/]+:([^@/]*)@", url)
    assert found, f"no password in {url}"
    return found.group(1)


def script_defaults() -> dict[str, str]:
    """The ports the scripts default to: `${STREAMCORE_..._PORT:-N}`."""
    found: dict[str, str] = {}
    for script in (ROOT / "scripts").glob("*.sh"):
        found.update(re.findall(r"\$\{(STREAMCORE_\w+_PORT):-(\d+)\}", script.read_text()))
    return found


def test_the_file_loads_with_compose_go(project: dict[str, Any]) -> None:
    services = project["services"]
    assert set(services) == {
        "setup",
        "postgres",
        "kafka",
        "spark-master",
        "spark-worker",
        *(f"airflow-{component}" for component in AIRFLOW_COMPONENTS),
    }
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port["published"] == str(port["target"]), (name, port)
        if service.get("image") == services["setup"]["image"] and name != "setup":
            assert {v["target"]: v["source"] for v in service["volumes"]} == {
                PROJECT_DIR: str(ROOT),
                f"{PROJECT_DIR}/.venv": "venv",
                f"{PROJECT_DIR}/.cache": "cache",
            }, name
            assert service["working_dir"] == PROJECT_DIR
            ready = (
                "airflow-init"
                if name.startswith("airflow-") and name != "airflow-init"
                else "setup"
            )
            assert service["depends_on"][ready]["condition"] == "service_completed_successfully"
    assert services["setup"]["command"] == ["make", "venv", "jars"]
    init_after = services["airflow-init"]["depends_on"]
    assert init_after["postgres"]["condition"] == "service_healthy"


def test_every_service_gets_the_cluster_profile(
    project: dict[str, Any], profile: dict[str, str]
) -> None:
    defaults = script_defaults()
    db_password = project["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    for name, service in project["services"].items():
        if not (service.get("command") or [""])[0].startswith("scripts/"):
            continue
        env = service["environment"]
        for variable, value in profile.items():
            assert without_password(env[variable]) == in_container(value, project), (name, variable)
            if variable.endswith("_URL"):
                assert password(env[variable]) == db_password, (name, variable)
        for variable, value in env.items():
            if variable in profile:
                continue
            if variable in defaults:
                assert value == defaults[variable], (name, variable, value)
            else:
                assert variable in CONTAINER_ONLY, f"{name}: {variable} is not cluster mode's"


def test_postgres_is_the_cluster_database(project: dict[str, Any], profile: dict[str, str]) -> None:
    service = project["services"]["postgres"]
    url = re.fullmatch(r"[\w+]+://(\w+)@127\.0\.0\.1:(\d+)/(\w+)", profile["STREAMCORE_OUTBOX_URL"])
    assert url, profile["STREAMCORE_OUTBOX_URL"]
    user, port, database = url.groups()
    env = service["environment"]
    assert (env["POSTGRES_USER"], env["PGPORT"], env["POSTGRES_DB"]) == (user, port, database)
    assert [p["target"] for p in service["ports"]] == [int(port)]
    assert run([str(ROOT / "scripts" / "postgres.sh"), "url"], profile).strip() == url.group(0)
    assert service["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]


def test_kafka_runs_the_cluster_broker(project: dict[str, Any], profile: dict[str, str]) -> None:
    service = project["services"]["kafka"]
    script = str(ROOT / "scripts" / "kafka.sh")
    assert service["command"] == ["scripts/kafka.sh", "run"]
    in_compose = run([script, "run", "--print"], service["environment"])
    in_cluster = run([script, "run", "--print"], profile)
    props = dict(line.split("=", 1) for line in in_compose.splitlines() if "=" in line)
    env = service["environment"]
    assert env["STREAMCORE_KAFKA_HOST"] == "0.0.0.0"
    assert env["STREAMCORE_KAFKA_ADVERTISED_HOST"] == service["hostname"] == "kafka"
    ports = {p["target"] for p in service["ports"]}
    advertised = props["advertised.listeners"].split(",")
    assert {int(listener.rsplit(":", 1)[1]) for listener in advertised} == ports
    assert f"PLAINTEXT://{env['STREAMCORE_KAFKA_BOOTSTRAP_SERVERS']}" in advertised
    assert all(
        listener.split("://")[1].startswith("0.0.0.0:")
        for listener in props["listeners"].split(",")
    )
    # Everything else is cluster mode's broker: the same ports, SASL users, retention, ...
    as_loopback = in_compose.replace("0.0.0.0:", "127.0.0.1:").replace("kafka:", "127.0.0.1:")
    assert as_loopback == in_cluster

    refused = subprocess.run([script, "run", "--bogus"], capture_output=True, text=True)
    assert refused.returncode == 1 and "unknown option '--bogus'" in refused.stderr


def test_spark_runs_the_cluster_master_and_worker(
    project: dict[str, Any], profile: dict[str, str]
) -> None:
    script = str(ROOT / "scripts" / "spark-cluster.sh")
    for role in ("master", "worker"):
        service = project["services"][f"spark-{role}"]
        env = service["environment"]
        assert service["command"] == ["scripts/spark-cluster.sh", "run", role]
        assert env["STREAMCORE_SPARK_HOST"] == service["hostname"] == f"spark-{role}"
        in_compose = shlex.split(run([script, "run", role, "--print"], env))
        in_cluster = shlex.split(run([script, "run", role, "--print"], profile))
        host = in_compose[in_compose.index("--host") + 1]
        assert host == service["hostname"]
        loopback = [arg.replace("spark-master:", "127.0.0.1:") for arg in in_compose]
        loopback[loopback.index("--host") + 1] = "127.0.0.1"
        assert loopback == in_cluster
        ports = {int(in_compose[i + 1]) for i, a in enumerate(in_compose) if a.endswith("-port")}
        assert ports == {p["target"] for p in service["ports"]}, role
        if role == "worker":
            assert in_compose[-1] == env["STREAMCORE_SPARK_MASTER"]
            assert env["STREAMCORE_SPARK_MASTER_HOST"] == "spark-master"


def test_airflow_runs_the_cluster_config(
    project: dict[str, Any], profile: dict[str, str], tmp_path: Path
) -> None:
    script = str(ROOT / "scripts" / "airflow.sh")
    configs: dict[str, configparser.ConfigParser] = {}
    for component in AIRFLOW_COMPONENTS:
        service = project["services"][f"airflow-{component}"]
        assert service["command"] == ["scripts/airflow.sh", "run", component]
        env = service["environment"]
        for mode, variables in (("compose", env), ("cluster", profile)):
            home = tmp_path / mode / component
            printed = run(
                [script, "run", component, "--print"], {**variables, "AIRFLOW_HOME": str(home)}
            )
            wanted = "db migrate" if component == "init" else component
            assert printed.strip() == f"{VENV_BIN / 'airflow'} {wanted}"
            text = (home / "airflow.cfg").read_text().replace(str(home), "AIRFLOW_HOME")
            config = configparser.ConfigParser(interpolation=None)
            config.read_string(text)
            if mode == "compose":
                passwords = json.loads((home / "passwords.json").read_text())
                assert passwords == {"admin": env["STREAMCORE_AIRFLOW_PASSWORD"]}
                overrides = {k: v for k, v in env.items() if k.startswith("AIRFLOW__")}
                for name, value in overrides.items():
                    _, section, option = name.lower().split("__")
                    assert config.has_option(section, option), f"{name}: not in airflow.cfg"
                    config.set(section, option, value)
            configs[mode] = config
        compose, cluster = configs["compose"], configs["cluster"]
        assert compose.sections() == cluster.sections()
        for section in cluster.sections():
            assert set(compose[section]) == set(cluster[section]), section
            for option, value in cluster[section].items():
                got = compose[section][option]
                if option in ("fernet_key", "secret_key", "jwt_secret"):
                    assert got == env[f"AIRFLOW__{section.upper()}__{option.upper()}"]
                    assert got != value
                elif (section, option) == ("api", "host"):
                    assert got == "0.0.0.0"
                elif option.startswith(("sql_alchemy_conn", "execution_api_server_url")):
                    assert without_password(got) == in_container(value, project), option
                else:
                    assert got == value, (component, section, option)
    port = int(cluster["api"]["port"])
    assert [p["target"] for p in project["services"]["airflow-api-server"]["ports"]] == [port]


def test_a_broken_file_is_refused_with_the_parser_message(
    compose_check: Path, tmp_path: Path
) -> None:
    text = COMPOSE_FILE.read_text()
    shutil.copy(ENV_FILE, tmp_path / ".env.example")
    cases = {
        "unknown-key": (
            text.replace("  kafka:\n", "  kafka:\n    restart_policy: always\n", 1),
            ".env.example",
            "services.kafka.restart_policy",
        ),
        "missing-service": (
            text.replace(
                "      spark-master:\n        condition", "      spark-mastr:\n        condition", 1
            ),
            ".env.example",
            'depends on undefined service "spark-mastr"',
        ),
        "missing-secret": (
            text,
            "no-secret.env",
            "STREAMCORE_POSTGRES_PASSWORD is missing a value",
        ),
    }
    (tmp_path / "no-secret.env").write_text(
        "".join(
            line
            for line in ENV_FILE.read_text().splitlines(keepends=True)
            if not line.startswith("STREAMCORE_POSTGRES_PASSWORD=")
        )
    )
    for case, (content, env_file, message) in cases.items():
        broken = tmp_path / f"{case}.yml"
        broken.write_text(content)
        assert content != text or case == "missing-secret", f"{case}: the edit did not apply"
        done = load(compose_check, broken, tmp_path / env_file)
        assert done.returncode == 1, (case, done.stdout[:200])
        errors = [line for line in done.stderr.splitlines() if line.startswith("compose-check: ")]
        assert errors and message in errors[0], (case, done.stderr)

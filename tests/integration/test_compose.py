"""docker-compose.yml against cluster mode, without a container engine. The file is loaded by
compose-go, the library Docker Compose is built on (tools/compose-check, built here with Go from
the Go module proxy), with .env.example as its env file, its empty secrets set here. Then each
service is compared with what `make cluster` runs: the same script in its `run` mode, asked with
`--print` for the command and configuration it would run (nothing is started), once with the
service's environment and once with cluster mode's (the profile of `scripts/cluster.sh env`).
The two may differ only where a container needs it: the services' names for 127.0.0.1, bind
addresses, and the secrets of .env. What is published on the host, and how the rest is
protected, is checked too: the Spark master and worker started with compose's Spark settings
refuse a spark-submit without the secret. .env.example as it is, or a broken file, is refused
with the parser's own message."""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import ROOT, VENV_BIN, free_port, parse_exports

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
    "STREAMCORE_SPARK_AUTH_SECRET",
    "STREAMCORE_KAFKA_SASL_PASSWORD",
    "STREAMCORE_KAFKA_ADMIN_PASSWORD",
}
# The secrets .env.example leaves empty (`NAME=`): compose refuses to start until each is set.
SECRETS = re.findall(r"^([A-Z_]+)=$", ENV_FILE.read_text(), flags=re.MULTILINE)
# What the host sees: the Airflow UI on every interface (behind its login), the Spark UIs and
# Kafka's SASL listener on loopback. Port -> (service, host address; "" for every interface).
PUBLISHED = {
    8080: ("airflow-api-server", ""),
    8089: ("spark-master", "127.0.0.1"),
    8090: ("spark-worker", "127.0.0.1"),
    9094: ("kafka", "127.0.0.1"),
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
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """.env.example with each of its secrets set, as a user's .env."""
    text = ENV_FILE.read_text()
    for name in SECRETS:
        text = text.replace(f"\n{name}=\n", f"\n{name}={secrets.token_urlsafe(32)}\n")
    path = tmp_path_factory.mktemp("compose") / ".env"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def project(compose_check: Path, env_file: Path) -> dict[str, Any]:
    done = load(compose_check, COMPOSE_FILE, env_file)
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


def published(project: dict[str, Any]) -> dict[int, tuple[str, str]]:
    """Each port published on the host: the service and the host address ("" for all)."""
    return {
        port["target"]: (name, port.get("host_ip", ""))
        for name, service in project["services"].items()
        for port in service.get("ports", [])
    }


def listening(project: dict[str, Any]) -> dict[int, str]:
    """Each port a service listens on for the others, published or only exposed to the compose
    network, and that service."""
    found = {port: name for port, (name, _) in published(project).items()}
    for name, service in project["services"].items():
        found.update({int(port): name for port in service.get("expose", [])})
    return found


def in_container(value: str, project: dict[str, Any]) -> str:
    """A cluster-mode value as a container sees it: the project mounted at PROJECT_DIR, and each
    service reached by its name where cluster mode reaches it on 127.0.0.1."""
    value = value.replace(str(ROOT), PROJECT_DIR)
    for port, service in listening(project).items():
        value = value.replace(f"127.0.0.1:{port}", f"{service}:{port}")
    return value


def spark_defaults(folder: Path) -> dict[str, str]:
    """The settings of `folder`/spark-defaults.conf, {} when there is none."""
    path = folder / "spark-defaults.conf"
    if not path.exists():
        return {}
    assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    lines = (line.split(None, 1) for line in path.read_text().splitlines())
    return {line[0]: line[1] for line in lines if line and not line[0].startswith("#")}


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
    assert "ports" not in service and service["expose"] == [port]  # the compose network only
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
    protocols = dict(pair.split(":") for pair in props["listener.security.protocol.map"].split(","))
    advertised = {
        int(address.rsplit(":", 1)[1]): protocols[name]
        for name, address in (a.split("://") for a in props["advertised.listeners"].split(","))
    }
    # PLAINTEXT for the services, in the compose network; outside it, SASL only.
    bootstrap = env["STREAMCORE_KAFKA_BOOTSTRAP_SERVERS"]
    assert f"PLAINTEXT://{bootstrap}" in props["advertised.listeners"]
    for port in (p["target"] for p in service["ports"]):
        assert advertised[port] == "SASL_PLAINTEXT", (port, advertised)
    exposed = {int(port) for port in service["expose"]}
    assert {p for p, protocol in advertised.items() if protocol == "PLAINTEXT"} <= exposed
    assert all(
        listener.split("://")[1].startswith("0.0.0.0:")
        for listener in props["listeners"].split(",")
    )
    # The SASL users' passwords are .env's, not the ones loopback's broker has by default.
    jaas = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    sasl, admin = env["STREAMCORE_KAFKA_SASL_PASSWORD"], env["STREAMCORE_KAFKA_ADMIN_PASSWORD"]
    assert f'user_streamcore="{sasl}"' in jaas and f'user_admin="{admin}"' in jaas
    assert "streamcore-secret" not in in_compose and "admin-secret" not in in_compose
    # Everything else is cluster mode's broker: the same ports, SASL users, retention, ...
    as_loopback = in_compose.replace("0.0.0.0:", "127.0.0.1:").replace("kafka:", "127.0.0.1:")
    as_loopback = as_loopback.replace(sasl, "streamcore-secret").replace(admin, "admin-secret")
    assert as_loopback == in_cluster

    refused = subprocess.run([script, "run", "--bogus"], capture_output=True, text=True)
    assert refused.returncode == 1 and "unknown option '--bogus'" in refused.stderr


def test_spark_runs_the_cluster_master_and_worker(
    project: dict[str, Any], profile: dict[str, str], tmp_path: Path
) -> None:
    script = str(ROOT / "scripts" / "spark-cluster.sh")
    secret = project["services"]["spark-master"]["environment"]["STREAMCORE_SPARK_AUTH_SECRET"]
    for role in ("master", "worker"):
        service = project["services"][f"spark-{role}"]
        env = service["environment"]
        assert service["command"] == ["scripts/spark-cluster.sh", "run", role]
        assert env["STREAMCORE_SPARK_HOST"] == service["hostname"] == f"spark-{role}"
        homes = {mode: tmp_path / mode / role for mode in ("compose", "cluster")}
        in_compose = shlex.split(
            run(
                [script, "run", role, "--print"],
                {**env, "STREAMCORE_SPARK_CLUSTER_HOME": str(homes["compose"])},
            )
        )
        in_cluster = shlex.split(
            run(
                [script, "run", role, "--print"],
                {**profile, "STREAMCORE_SPARK_CLUSTER_HOME": str(homes["cluster"])},
            )
        )
        host = in_compose[in_compose.index("--host") + 1]
        assert host == service["hostname"]
        loopback = [arg.replace("spark-master:", "127.0.0.1:") for arg in in_compose]
        loopback[loopback.index("--host") + 1] = "127.0.0.1"
        loopback = [arg.replace(str(homes["compose"]), str(homes["cluster"])) for arg in loopback]
        assert loopback == in_cluster
        ports = {int(in_compose[i + 1]) for i, a in enumerate(in_compose) if a.endswith("-port")}
        assert ports == {p for p, name in listening(project).items() if name == f"spark-{role}"}
        if role == "worker":
            assert in_compose[-1] == env["STREAMCORE_SPARK_MASTER"]
            assert env["STREAMCORE_SPARK_MASTER_HOST"] == "spark-master"
        # RPC authentication with .env's secret in compose; none on cluster mode's loopback.
        assert env["STREAMCORE_SPARK_AUTH_SECRET"] == secret
        assert spark_defaults(homes["compose"] / "conf") == {
            "spark.authenticate": "true",
            "spark.authenticate.secret": secret,
            "spark.sql.variable.substitute": "false",
        }, role
        assert spark_defaults(homes["cluster"] / "conf") == {}, role


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
            # Only the scheduler's task runners spark-submit: they present the master's secret.
            conf = spark_defaults(home / "spark-conf")
            if mode == "compose" and component == "scheduler":
                secret = env["STREAMCORE_SPARK_AUTH_SECRET"]
                assert conf["spark.authenticate"] == "true", conf
                assert conf["spark.authenticate.secret"] == secret
                assert (
                    secret
                    == project["services"]["spark-master"]["environment"][
                        "STREAMCORE_SPARK_AUTH_SECRET"
                    ]
                )
            else:
                assert conf == {} and "STREAMCORE_SPARK_AUTH_SECRET" not in variables, component
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


JOB = """
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("compose-auth-check").getOrCreate()
print("summed", spark.range(100).selectExpr("sum(id)").first()[0])
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_the_spark_master_refuses_a_client_without_the_secret(
    project: dict[str, Any], tmp_path: Path
) -> None:
    """Compose's Spark settings run for real, on loopback: the master and worker of
    spark-cluster.sh with the services' secret, then one small job spark-submitted twice at
    once. With the Spark settings airflow.sh writes for the scheduler, it runs on the worker;
    without them the master refuses it (Spark's standalone RPC takes code from anyone who
    reaches it unless spark.authenticate is on)."""
    services = project["services"]
    secret = services["spark-master"]["environment"]["STREAMCORE_SPARK_AUTH_SECRET"]
    master_port = free_port()
    cluster = {
        "STREAMCORE_SPARK_CLUSTER_HOME": str(tmp_path / "spark"),
        "STREAMCORE_SPARK_MASTER_PORT": str(master_port),
        "STREAMCORE_SPARK_MASTER_UI_PORT": str(free_port()),
        "STREAMCORE_SPARK_WORKER_UI_PORT": str(free_port()),
        "STREAMCORE_SPARK_WORKER_CORES": "1",
        "STREAMCORE_SPARK_WORKER_MEMORY": "1g",
        "STREAMCORE_SPARK_START_TIMEOUT": "400",
        "STREAMCORE_SPARK_AUTH_SECRET": secret,
    }
    script = str(ROOT / "scripts" / "spark-cluster.sh")
    scheduler = {
        **services["airflow-scheduler"]["environment"],
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
    }
    run([str(ROOT / "scripts" / "airflow.sh"), "run", "scheduler", "--print"], scheduler)
    (tmp_path / "job.py").write_text(JOB)
    submit = [
        str(VENV_BIN / "spark-submit"),
        *("--master", f"spark://127.0.0.1:{master_port}"),
        str(tmp_path / "job.py"),
    ]
    client = {"PYSPARK_PYTHON": str(VENV_BIN / "python")}
    started = subprocess.run(
        [script, "start"], env=script_env(cluster), capture_output=True, text=True, timeout=500
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        jobs = {
            name: subprocess.Popen(
                submit,
                env=script_env(variables),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for name, variables in (
                ("with", {**client, "SPARK_CONF_DIR": str(tmp_path / "airflow" / "spark-conf")}),
                ("without", client),
            )
        }
        out = {name: job.communicate(timeout=600)[0] for name, job in jobs.items()}
    finally:
        subprocess.run([script, "stop"], env=script_env(cluster), capture_output=True, timeout=120)
    assert jobs["with"].returncode == 0 and "summed 4950" in out["with"], out["with"][-3000:]
    assert jobs["without"].returncode != 0, out["without"][-3000:]
    assert "Expected SaslMessage" in out["without"], out["without"][-3000:]
    assert "summed" not in out["without"]


def test_only_what_a_person_needs_is_published(project: dict[str, Any]) -> None:
    """The Airflow UI; on loopback only, the Spark UIs (no login) and Kafka's SASL listener. Not
    the Spark master's RPC port (it runs the code it is sent), Kafka's PLAINTEXT listener or
    PostgreSQL: those are for the services, in the compose network."""
    assert published(project) == PUBLISHED
    inside = {port: name for port, name in listening(project).items() if port not in PUBLISHED}
    assert inside == {
        55432: "postgres",
        9092: "kafka",
        9093: "kafka",
        7077: "spark-master",
    }


def test_the_example_env_starts_nothing_until_its_secrets_are_set(
    compose_check: Path, env_file: Path, tmp_path: Path
) -> None:
    """.env.example has no working secret (a user who copies it would keep it): loaded as it is,
    every secret is refused by name; with all but one set, that one is."""
    assert set(SECRETS) >= {
        "STREAMCORE_POSTGRES_PASSWORD",
        "AIRFLOW__CORE__FERNET_KEY",
        "STREAMCORE_SPARK_AUTH_SECRET",
        "STREAMCORE_KAFKA_SASL_PASSWORD",
    }
    done = load(compose_check, COMPOSE_FILE, ENV_FILE)
    assert done.returncode == 1
    for name in SECRETS:
        assert f"required variable {name} is missing a value: set" in done.stderr, name
    filled = env_file.read_text()
    for name in SECRETS:
        one_missing = tmp_path / f"{name}.env"
        one_missing.write_text(re.sub(rf"(?m)^{name}=.*$", f"{name}=", filled))
        done = load(compose_check, COMPOSE_FILE, one_missing)
        assert done.returncode == 1, name
        named = set(re.findall(r"required variable (\w+) is missing a value", done.stderr))
        assert named == {name}, (name, done.stderr[-500:])


def test_a_broken_file_is_refused_with_the_parser_message(
    compose_check: Path, env_file: Path, tmp_path: Path
) -> None:
    text = COMPOSE_FILE.read_text()
    shutil.copy(env_file, tmp_path / ".env.example")
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
            for line in env_file.read_text().splitlines(keepends=True)
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

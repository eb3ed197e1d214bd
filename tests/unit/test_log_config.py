"""LogConfig: parsing `[log.configs.*]` / `[[log.match]]`, every invalid case and its message, the
environment overrides, and the routing rules (namespace prefix, group prefix, default, forced)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from streamcore.config import load_config, project_root
from streamcore.errors import ConfigError
from streamcore.log.config import LogConfig
from streamcore.log.kafka.backend import KAFKA_DEFAULTS, kafka_kwargs
from streamcore.log.kafka.description import KafkaLogDescription
from streamcore.log.local.backend import local_root
from streamcore.log.unified import UnifiedLogManager
from streamcore.redact import redact_properties

FULL = """
[log]
partitions = 4

[log.configs.default]
type = "local"

[log.configs.archive]
type = "local"
root = "/srv/archive"
partitions = 2
retention = "30d"
segment_bytes = 8192
segment_roll = "1h"
fsync = "always"
max_record_bytes = 4096

[log.configs.kafka]
type = "kafka"
bootstrap_servers = "broker:9093"
topic_prefix = "sc-"
timeout = "5s"
replication_factor = 3
partitions = 12
[log.configs.kafka.properties]
"security.protocol" = "SASL_SSL"
"enable.idempotence" = true
"linger.ms" = 5

[log.configs.scratch]
type = "memory"

[[log.match]]
namespace = "bulk"
config = "kafka"
[[log.match]]
namespace = ["arch", "bulk/dlq-"]
config = "archive"
[[log.match]]
group = "audit/"
config = "kafka"
[[log.match]]
group = ["tmp", "test/scratch-"]
config = "scratch"
"""


def parse(text: str, **env: str) -> LogConfig:
    return LogConfig.parse(tomllib.loads(text), environ=env)


def route(config: LogConfig, name: str, group: str | None = None) -> str:
    return config.route(name, group).config


# -- parsing ----------------------------------------------------------------------------------
class TestParse:
    def test_full_schema(self) -> None:
        config = parse(FULL)
        assert sorted(config.configs) == ["archive", "default", "kafka", "scratch"]
        archive = config.configs["archive"]
        assert archive.type == "local"
        assert archive.options == {
            "root": "/srv/archive",
            "partitions": 2,
            "retention_ms": 30 * 86_400_000,
            "segment_bytes": 8192,
            "segment_roll_ms": 3_600_000,
            "fsync": "always",
            "max_record_bytes": 4096,
        }
        assert local_root(archive, Path("/home")) == Path("/srv/archive")
        kafka = config.configs["kafka"]
        assert kafka.options == {
            "bootstrap_servers": "broker:9093",
            "topic_prefix": "sc-",
            "timeout": 5.0,
            "replication_factor": 3,
            "partitions": 12,
            "properties": {
                "security.protocol": "SASL_SSL",
                "enable.idempotence": True,
                "linger.ms": 5,
            },
        }
        assert config.configs["scratch"].options == {}
        assert [(r.position, r.config, r.namespaces, r.groups) for r in config.rules] == [
            (1, "kafka", ("bulk",), ()),
            (2, "archive", ("arch", "bulk/dlq-"), ()),
            (3, "kafka", (), ("audit/",)),
            (4, "scratch", (), ("tmp", "test/scratch-")),
        ]
        assert config.rules[1].label == "[[log.match]] #2 (namespace = [arch, bulk/dlq-])"
        assert config.rules[2].label == '[[log.match]] #3 (group = "audit/")'
        assert [b.name for b in config.used()] == ["default", "kafka", "archive", "scratch"]

    def test_nothing_configured_means_one_builtin_local_default(self) -> None:
        config = parse("")
        assert list(config.configs) == ["default"]
        default = config.configs["default"]
        assert (default.type, default.builtin, default.options) == ("local", True, {})
        assert local_root(default, Path("/h")) == Path("/h/log")
        assert route(config, "bulk/command") == "default"
        assert [b.name for b in config.used()] == ["default"]

    def test_kafka_defaults_and_numeric_timeout(self) -> None:
        config = parse('[log.configs.k]\ntype = "kafka"\ntimeout = 2.5\n')
        assert config.configs["k"].options == {**KAFKA_DEFAULTS, "timeout": 2.5}

    def test_relative_local_root_is_under_home(self) -> None:
        config = parse('[log.configs.default]\ntype = "local"\nroot = "other"\n')
        assert local_root(config.configs["default"], Path("/h")) == Path("/h/other")

    def test_a_single_match_table_is_accepted(self) -> None:
        config = parse(
            '[log.configs.m]\ntype = "memory"\n[log.match]\nnamespace = "a"\nconfig = "m"'
        )
        assert route(config, "a/b") == "m"

    def test_labels(self) -> None:
        config = parse(FULL)
        labels = {name: b.label for name, b in config.configs.items()}
        assert labels == {
            "default": "local",
            "archive": "local:archive",
            "kafka": "kafka",
            "scratch": "memory:scratch",
        }

    def test_shipped_file_routes_everything_to_local(self) -> None:
        config = LogConfig.load(project_root() / "include" / "streamcore.toml", environ={})
        assert config.configs["default"].type == "local"
        assert config.configs["kafka"].type == "kafka"
        assert config.rules == ()
        assert [b.name for b in config.used()] == ["default"]

    def test_from_settings_uses_the_loaded_toml_table(self, tmp_path: Path) -> None:
        path = tmp_path / "streamcore.toml"
        path.write_text(FULL)
        settings = load_config(path)
        assert settings.table["log"]["partitions"] == 4
        config = LogConfig.from_settings(settings, environ={})
        assert route(config, "bulk/command") == "kafka"

    def test_unreadable_file(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.toml"
        path.write_text("[log\n")
        with pytest.raises(ConfigError, match=r"cannot read config .*fix the TOML syntax"):
            LogConfig.load(path)


BAD_CASES = [
    pytest.param(
        '[log.configs.x]\ntype = "redis"\n',
        "log.configs.x.type = 'redis' is not a backend type; use one of local, kafka, memory",
        id="unknown-type",
    ),
    pytest.param(
        "[log.configs.x]\nroot = 'a'\n",
        "log.configs.x.type is missing; set type = one of local, kafka, memory",
        id="missing-type",
    ),
    pytest.param(
        '[[log.match]]\nnamespace = "bulk"\nconfig = "kafak"\n',
        "[[log.match]] #1 (namespace = \"bulk\"): config = 'kafak' is not defined; add a "
        "[log.configs.kafak] table with a type, or use one of: default",
        id="unknown-config-in-rule",
    ),
    pytest.param(
        '[[log.match]]\nconfig = "default"\n',
        '[[log.match]] #1 has neither namespace nor group; add namespace = "bulk"',
        id="rule-without-namespace-or-group",
    ),
    pytest.param(
        '[[log.match]]\nnamespace = "a"\ngroup = "b"\nconfig = "default"\n',
        "[[log.match]] #1 has both namespace and group; split it into two [[log.match]] rules",
        id="rule-with-both",
    ),
    pytest.param(
        '[[log.match]]\nnamespace = "a"\n',
        '[[log.match]] #1.config is missing; name the config to use, e.g. config = "kafka"',
        id="rule-without-config",
    ),
    pytest.param(
        '[[log.match]]\nname = "a"\nconfig = "default"\n',
        "[[log.match]] #1: unknown key(s) name; a rule has namespace or group, and config",
        id="rule-unknown-key",
    ),
    pytest.param(
        '[[log.match]]\nnamespace = "bulk-x"\nconfig = "default"\n',
        "[[log.match]] #1.namespace = 'bulk-x' is not a name prefix: use a namespace such as",
        id="bad-prefix",
    ),
    pytest.param(
        '[[log.match]]\ngroup = "9x/a"\nconfig = "default"\n',
        "[[log.match]] #1.group = '9x/a' is not a name prefix",
        id="bad-group-namespace",
    ),
    pytest.param(
        '[[log.match]]\nnamespace = []\nconfig = "default"\n',
        "[[log.match]] #1.namespace is an empty list; give at least one prefix",
        id="empty-prefix-list",
    ),
    pytest.param(
        '[[log.match]]\nnamespace = 3\nconfig = "default"\n',
        "[[log.match]] #1.namespace must be a string or a list of strings, got 3",
        id="prefix-not-a-string",
    ),
    pytest.param(
        '[log.configs.default]\ntype = "local"\nbootstrap_servers = "x"\n',
        "log.configs.default: unknown option(s) bootstrap_servers for type local; use root, "
        "partitions, retention",
        id="kafka-option-on-local",
    ),
    pytest.param(
        '[log.configs.m]\ntype = "memory"\npartitions = 2\n',
        "log.configs.m: unknown option(s) partitions for type memory; a memory config takes no",
        id="option-on-memory",
    ),
    pytest.param(
        '[log.configs.default]\ntype = "local"\nfsync = "sometimes"\n',
        "log.configs.default.fsync = 'sometimes'; use one of none, batch, always",
        id="bad-fsync",
    ),
    pytest.param(
        '[log.configs.default]\ntype = "local"\nretention = "4 weeks"\n',
        "invalid log.configs.default.retention '4 weeks': use a number with a unit",
        id="bad-retention",
    ),
    pytest.param(
        '[log.configs.default]\ntype = "local"\npartitions = 0\n',
        "log.configs.default.partitions is 0; use 1..1000",
        id="partitions-out-of-range",
    ),
    pytest.param(
        '[log.configs.default]\ntype = "local"\nsegment_bytes = true\n',
        "log.configs.default.segment_bytes must be an integer, got True",
        id="bool-is-not-an-int",
    ),
    pytest.param(
        '[log.configs.k]\ntype = "kafka"\nreplication_factor = "three"\n',
        "log.configs.k.replication_factor must be an integer, got 'three'",
        id="kafka-bad-int",
    ),
    pytest.param(
        '[log.configs.k]\ntype = "kafka"\nbootstrap_servers = ""\n',
        "log.configs.k.bootstrap_servers must be a non-empty string, got ''",
        id="kafka-empty-bootstrap",
    ),
    pytest.param(
        '[log.configs.k]\ntype = "kafka"\ntimeout = 0\n',
        "log.configs.k.timeout is 0; use a positive duration such as '30s'",
        id="kafka-zero-timeout",
    ),
    pytest.param(
        '[log.configs.k]\ntype = "kafka"\nproperties = "acks=all"\n',
        "log.configs.k.properties must be a table of librdkafka properties",
        id="kafka-properties-not-a-table",
    ),
    pytest.param(
        '[log.configs.k]\ntype = "kafka"\n[log.configs.k.properties]\n"a.b" = [1]\n',
        'log.configs.k.properties."a.b" = [1]: a librdkafka property is a string, number or',
        id="kafka-property-not-a-scalar",
    ),
    pytest.param(
        '[log.configs.k]\ntype = "kafka"\n[log.configs.k.properties]\n"bootstrap.servers" = "x"\n',
        'log.configs.k.properties."bootstrap.servers": set log.configs.k.bootstrap_servers instead',
        id="kafka-bootstrap-in-properties",
    ),
    pytest.param(
        '[log.configs."a b"]\ntype = "local"\n',
        "log.configs.a b: a config name uses letters, digits, '_' and '-' only",
        id="bad-config-name",
    ),
    pytest.param(
        "[log.configs]\nx = 3\n",
        'log.configs.x must be a table, e.g. [log.configs.x] with type = "local"',
        id="config-not-a-table",
    ),
    pytest.param(
        "[log]\nconfigs = 3\n",
        "log.configs must be a table of named configs",
        id="configs-not-a-table",
    ),
    pytest.param(
        "[log]\nmatch = 3\n",
        "log.match must be an array of tables: write each rule as [[log.match]]",
        id="match-not-an-array",
    ),
    pytest.param(
        '[log]\nbackend = "redis"\n',
        "log.backend = 'redis' is neither a config nor a backend type; use one of default, "
        "kafka, local, memory",
        id="unknown-forced-backend",
    ),
    pytest.param(
        "[log]\nbackend = 3\n",
        "log.backend = 3: use a config name or one of local, kafka, memory",
        id="forced-backend-not-a-string",
    ),
    pytest.param("log = 3\n", "[log] in the config file must be a table", id="log-not-a-table"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CASES)
def test_invalid_configs_name_the_key_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert message in str(info.value)


# -- environment overrides --------------------------------------------------------------------
class TestEnvironment:
    def test_bootstrap_and_prefix_override_every_kafka_config(self) -> None:
        text = FULL + '[log.configs.k2]\ntype = "kafka"\n'
        config = parse(
            text,
            STREAMCORE_KAFKA_BOOTSTRAP_SERVERS=" 10.0.0.1:9092,10.0.0.2:9092 ",
            STREAMCORE_KAFKA_TOPIC_PREFIX="ci-42-",
        )
        for name in ("kafka", "k2"):
            options = config.configs[name].options
            assert options["bootstrap_servers"] == "10.0.0.1:9092,10.0.0.2:9092"
            assert options["topic_prefix"] == "ci-42-"
        assert config.configs["kafka"].options["properties"]["linger.ms"] == 5
        assert "bootstrap_servers" not in config.configs["archive"].options

    def test_empty_bootstrap_variable_is_an_error(self) -> None:
        with pytest.raises(ConfigError, match="STREAMCORE_KAFKA_BOOTSTRAP_SERVERS is empty"):
            parse(FULL, STREAMCORE_KAFKA_BOOTSTRAP_SERVERS=" ")

    def test_backend_memory_forces_every_name_to_a_builtin_memory_config(self) -> None:
        config = parse(
            '[[log.match]]\nnamespace = "bulk"\nconfig = "default"\n',
            STREAMCORE_LOG_BACKEND="memory",
        )
        assert config.configs["memory"].type == "memory"
        assert config.configs["memory"].builtin
        for name, group in [("bulk/a", None), ("x/y", "audit/w"), ("plain", None)]:
            found = config.route(name, group)
            assert found.config == "memory"
            assert found.reason == (
                "STREAMCORE_LOG_BACKEND=memory forces every log to a built-in memory config"
            )
        assert [b.name for b in config.used()] == ["memory"]
        assert config.default.name == "memory"

    def test_backend_type_picks_the_first_config_of_that_type(self) -> None:
        config = parse(FULL, STREAMCORE_LOG_BACKEND="kafka")
        assert route(config, "anything/x") == "kafka"
        assert config.configs["kafka"].options["bootstrap_servers"] == "broker:9093"
        config = parse(FULL, STREAMCORE_LOG_BACKEND="memory")
        assert route(config, "bulk/command") == "scratch"

    def test_backend_can_name_a_config(self) -> None:
        assert route(parse(FULL, STREAMCORE_LOG_BACKEND="archive"), "bulk/command") == "archive"
        assert route(parse(FULL, STREAMCORE_LOG_BACKEND="default"), "bulk/command") == "default"
        assert route(parse("", STREAMCORE_LOG_BACKEND="default"), "bulk/command") == "default"

    def test_builtin_kafka_gets_the_env_bootstrap(self) -> None:
        config = parse("", STREAMCORE_LOG_BACKEND="kafka", STREAMCORE_KAFKA_BOOTSTRAP_SERVERS="b:1")
        assert config.configs["kafka"].options == {**KAFKA_DEFAULTS, "bootstrap_servers": "b:1"}

    def test_toml_backend_key_and_env_precedence(self) -> None:
        text = FULL.replace("partitions = 4\n", 'partitions = 4\nbackend = "scratch"\n', 1)
        assert route(parse(text), "bulk/command") == "scratch"
        assert route(parse(text, STREAMCORE_LOG_BACKEND="archive"), "bulk/command") == "archive"
        assert route(parse(text, STREAMCORE_LOG_BACKEND=" "), "bulk/command") == "scratch"

    def test_unknown_env_backend(self) -> None:
        with pytest.raises(ConfigError) as info:
            parse(FULL, STREAMCORE_LOG_BACKEND="postgres")
        assert str(info.value) == (
            "STREAMCORE_LOG_BACKEND=postgres is neither a config nor a backend type; use one of "
            "archive, default, kafka, local, memory, scratch"
        )

    def test_from_settings_reads_the_process_environment(
        self, tmp_path: Path, clean_env: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "streamcore.toml"
        path.write_text(FULL)
        clean_env.setenv("STREAMCORE_LOG_BACKEND", "memory")
        config = LogConfig.from_settings(load_config(path, home=tmp_path))
        assert route(config, "bulk/command") == "scratch"


# -- ${VAR} in a kafka config's properties ---------------------------------------------------
SECURED = """
[log.configs.secured]
type = "kafka"
[log.configs.secured.properties]
"security.protocol" = "SASL_PLAINTEXT"
"sasl.mechanisms" = "PLAIN"
"sasl.username" = "${KAFKA_USER:-streamcore}"
"sasl.password" = "${KAFKA_PASSWORD}"
"linger.ms" = 5
[[log.match]]
namespace = "bulk"
config = "secured"
"""
SECRET = "s3cret-from-env"


def secured_properties(**env: str) -> dict[str, object]:
    return dict(parse(SECURED, **env).configs["secured"].options["properties"])


class TestPropertyVariables:
    def test_set_variables_are_substituted_in_string_values(self) -> None:
        props = secured_properties(KAFKA_PASSWORD=SECRET, KAFKA_USER="alice")
        assert props == {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": SECRET,
            "linger.ms": 5,
        }
        text = SECURED.replace('"${KAFKA_PASSWORD}"', '"${A}:${B}/${A}"')
        config = parse(text, A="x", B="y")
        assert config.configs["secured"].options["properties"]["sasl.password"] == "x:y/x"

    @pytest.mark.parametrize(
        ("env", "state"),
        [({}, "is not set"), ({"KAFKA_PASSWORD": ""}, "is set but empty")],
        ids=["unset", "empty"],
    )
    def test_an_unset_variable_names_the_variable_property_config_and_fix(
        self, env: dict[str, str], state: str
    ) -> None:
        with pytest.raises(ConfigError) as info:
            parse(SECURED, KAFKA_USER=SECRET, **env)
        assert str(info.value) == (
            'log.configs.secured.properties."sasl.password" takes ${KAFKA_PASSWORD} from the '
            f"environment, but the environment variable KAFKA_PASSWORD {state}; export "
            "KAFKA_PASSWORD in the environment of the process that loads the config (the shell, "
            "the Airflow worker, the Spark driver: executors get the resolved value), or give a "
            'default: "${KAFKA_PASSWORD:-default}"'
        )
        assert SECRET not in str(info.value)

    def test_defaults_apply_when_unset_or_empty(self) -> None:
        assert secured_properties(KAFKA_PASSWORD="p")["sasl.username"] == "streamcore"
        assert secured_properties(KAFKA_PASSWORD="p", KAFKA_USER="")["sasl.username"] == (
            "streamcore"
        )
        text = SECURED.replace("${KAFKA_PASSWORD}", "${KAFKA_PASSWORD:-}")
        assert parse(text).configs["secured"].options["properties"]["sasl.password"] == ""
        text = SECURED.replace("${KAFKA_PASSWORD}", "${KAFKA_PASSWORD:-a:-b c}")
        assert parse(text).configs["secured"].options["properties"]["sasl.password"] == "a:-b c"

    def test_double_dollar_brace_is_a_literal_and_other_dollars_stay(self) -> None:
        text = SECURED.replace("${KAFKA_PASSWORD}", "$${KAFKA_PASSWORD}-pa$$w$rd$")
        props = parse(text, KAFKA_PASSWORD=SECRET).configs["secured"].options["properties"]
        assert props["sasl.password"] == "${KAFKA_PASSWORD}-pa$$w$rd$"
        text = SECURED.replace("${KAFKA_PASSWORD}", "$$${KAFKA_PASSWORD}")
        props = parse(text, KAFKA_PASSWORD="v").configs["secured"].options["properties"]
        assert props["sasl.password"] == "$v"  # "$$" before "{" is one "$"
        text = SECURED.replace("${KAFKA_PASSWORD}", "$$$${KAFKA_PASSWORD}$${}")
        props = parse(text).configs["secured"].options["properties"]
        assert props["sasl.password"] == "$${KAFKA_PASSWORD}${}"

    @pytest.mark.parametrize(
        "value",
        ["${}", "${1X}", "${A B}", "hunter2${X", "${A:-${B}}", "${A:=x}", "${A-x}"],
    )
    def test_a_malformed_reference_is_an_error_without_the_value(self, value: str) -> None:
        text = SECURED.replace("${KAFKA_PASSWORD}", value)
        with pytest.raises(ConfigError) as info:
            parse(text, A="a", B="b", X="x")
        message = str(info.value)
        assert message.startswith(
            'log.configs.secured.properties."sasl.password" holds a "${" that is not a variable '
            "reference; write ${NAME} or ${NAME:-default}"
        )
        assert 'or $${ for a literal "${"' in message
        assert value not in message and "hunter2" not in message

    def test_only_property_values_are_substituted(self) -> None:
        text = SECURED.replace('"linger.ms" = 5', '"client.id" = "c"\n"x${A}" = 1')
        props = parse(text, KAFKA_PASSWORD="p", A="a").configs["secured"].options["properties"]
        assert props["x${A}"] == 1
        # other options are taken as written
        text = SECURED.replace('type = "kafka"', 'type = "kafka"\ntopic_prefix = "${A}-"')
        config = parse(text, KAFKA_PASSWORD="p", A="a")
        assert config.configs["secured"].options["topic_prefix"] == "${A}-"

    def test_an_unused_config_loads_and_fails_only_when_opened(self) -> None:
        # STREAMCORE_LOG_BACKEND=memory: the kafka config is never opened, so its missing
        # password must not break loading (tests, local runs with the production file).
        config = parse(SECURED, STREAMCORE_LOG_BACKEND="memory")
        assert route(config, "bulk/command") == "memory"
        secured = config.configs["secured"]
        assert "<unresolved: ${KAFKA_PASSWORD}, its variable is unset or empty>" in repr(secured)
        with pytest.raises(ConfigError, match=r"variable KAFKA_PASSWORD is not set; export"):
            kafka_kwargs(secured, load_config())
        um = UnifiedLogManager(load_config(), config)
        try:
            with pytest.raises(ConfigError, match=r"properties.\"sasl.password\" takes"):
                um.backend_manager("secured")
        finally:
            um.close()
        # a malformed reference is a file error: it fails at load, used or not
        with pytest.raises(ConfigError, match="not a variable reference"):
            parse(SECURED.replace("${KAFKA_USER", "${1"), STREAMCORE_LOG_BACKEND="memory")

    def test_resolved_secrets_are_redacted_in_reprs(self) -> None:
        config = parse(SECURED, KAFKA_PASSWORD=SECRET, KAFKA_USER="alice")
        secured = config.configs["secured"]
        assert SECRET not in repr(secured) and SECRET not in str(secured)
        assert "'sasl.password': '***'" in repr(secured) and "'alice'" in repr(secured)
        props = secured.options["properties"]
        assert props["sasl.password"] == SECRET  # only the repr hides it
        # the description a Spark driver sends carries the resolved value (executors need not
        # have the variable), and hides it in its repr
        description = KafkaLogDescription("kafka", "bulk/x", 1, "h:9094", "t", props)
        assert SECRET not in repr(description) and "'sasl.password': '***'" in repr(description)
        jaas = description.spark_options()["kafka.sasl.jaas.config"]
        assert f'password="{SECRET}"' in jaas and 'username="alice"' in jaas

    def test_redact_properties_masks_secret_keys_only(self) -> None:
        props = {
            "sasl.username": "u",
            "sasl.password": "1",
            "ssl.key.password": "2",
            "ssl.keystore.password": "3",
            "sasl.oauthbearer.client.secret": "4",
            "sasl.jaas.config": "5",
            "sasl.oauthbearer.config": "6",
            "ssl.key.pem": "7",
            "security.protocol": "SASL_SSL",
            "ssl.keystore.location": "/k.p12",
        }
        redacted = redact_properties(props)
        assert [k for k, v in redacted.items() if v == "***"] == [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "sasl.jaas.config",
            "sasl.oauthbearer.config",
            "ssl.key.pem",
        ]
        assert props["sasl.password"] == "1"  # a copy

    def test_load_reads_the_process_environment(
        self, tmp_path: Path, clean_env: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "streamcore.toml"
        path.write_text(SECURED)
        clean_env.delenv("KAFKA_USER", raising=False)
        clean_env.setenv("KAFKA_PASSWORD", SECRET)
        props = LogConfig.load(path).configs["secured"].options["properties"]
        assert (props["sasl.username"], props["sasl.password"]) == ("streamcore", SECRET)
        clean_env.delenv("KAFKA_PASSWORD")
        with pytest.raises(ConfigError, match="KAFKA_PASSWORD is not set"):
            LogConfig.from_settings(load_config(path, home=tmp_path))


# -- routing ----------------------------------------------------------------------------------
class TestRouting:
    @pytest.fixture
    def config(self) -> LogConfig:
        return parse(FULL)

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("bulk/command", "kafka"),  # namespace rule
            ("bulk/dlq-indexer", "kafka"),  # the first matching rule wins over #2's "bulk/dlq-"
            ("bulk", "kafka"),  # a bare word matches the namespace-less name too
            ("bulkier/x", "default"),  # a namespace is matched whole
            ("arch/2024", "archive"),
            ("import/docs", "default"),  # unmatched → default
            ("audit/entries", "default"),  # group rules never route by the log name
        ],
    )
    def test_logs_route_by_namespace_prefix(
        self, config: LogConfig, name: str, expected: str
    ) -> None:
        assert route(config, name) == expected

    def test_urn_prefix_rules(self) -> None:
        config = parse(
            '[log.configs.m]\ntype = "memory"\n[[log.match]]\nnamespace = "bulk/dlq-"\nconfig = "m"'
        )
        assert route(config, "bulk/dlq-indexer") == "m"
        assert route(config, "bulk/dlq") == "default"
        assert route(config, "bulk/command") == "default"

    def test_groups_route_logs_no_namespace_rule_matches(self, config: LogConfig) -> None:
        found = config.route("import/docs", "audit/writer")
        assert (found.config, found.by_group) == ("kafka", True)
        assert found.reason == '[[log.match]] #3 (group = "audit/")'
        assert route(config, "import/docs", "tmp") == "scratch"  # bare word: the global group
        assert route(config, "import/docs", "tmp/x") == "scratch"
        assert route(config, "import/docs", "test/scratch-1") == "scratch"
        assert route(config, "import/docs", "test/other") == "default"
        assert route(config, "import/docs", "auditor/x") == "default"

    def test_a_namespace_rule_wins_over_a_group_rule(self, config: LogConfig) -> None:
        found = config.route("arch/2024", "audit/writer")
        assert (found.config, found.by_group) == ("archive", False)
        assert route(config, "bulk/command", "tmp/x") == "kafka"

    def test_default_route_reason(self, config: LogConfig) -> None:
        found = config.route("import/docs", "app/g")
        assert found == config.route("import/docs", "app/g")  # cached, same answer
        assert (found.config, found.by_group) == ("default", False)
        assert "no [[log.match]] rule matches" in found.reason

    def test_rule_order_is_file_order(self) -> None:
        text = (
            '[log.configs.a]\ntype = "memory"\n[log.configs.b]\ntype = "memory"\n'
            '[[log.match]]\nnamespace = "x/special"\nconfig = "a"\n'
            '[[log.match]]\nnamespace = "x"\nconfig = "b"\n'
        )
        config = parse(text)
        assert route(config, "x/special-1") == "a"
        assert route(config, "x/other") == "b"

    def test_config_for_and_default(self, config: LogConfig) -> None:
        assert config.config_for("bulk/a").name == "kafka"
        assert config.config_for("x/a", "audit/w").name == "kafka"
        assert config.default.name == "default"


def test_archive_setting_per_namespace_rule() -> None:
    """Retention archives every log unless the first namespace rule matching it says otherwise,
    whichever backend a forced route sends it to."""
    text = """
    [[log.match]]
    namespace = "scratch"
    config = "default"
    archive = false
    [[log.match]]
    namespace = "bulk/dlq-"
    config = "default"
    archive = true
    [[log.match]]
    namespace = "bulk"
    config = "default"
    archive = false
    """
    config = parse(text)
    assert not config.archived("scratch/tmp") and not config.archived("bulk/command")
    assert config.archived("bulk/dlq-indexer") and config.archived("import/docs")
    forced = parse(text, STREAMCORE_LOG_BACKEND="memory")
    assert not forced.archived("scratch/tmp") and forced.archived("import/docs")


def test_state_changelogs_are_compacted_and_never_archived() -> None:
    """A state store's changelog is state, not history: whatever its namespace's rule says, the
    retention job compacts it and never archives it (docs/state.md, "Changelog")."""
    config = parse(
        """
        [[log.match]]
        namespace = "shop"
        config = "default"
        archive = true
        compact = false
        """
    )
    changelog = "shop/count-orders-counts-changelog"
    assert config.compacted(changelog) and not config.archived(changelog)
    assert not config.compacted("shop/orders") and config.archived("shop/orders")
    assert not config.compacted("changelog") and config.archived("changelog")


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ('namespace = "bulk"\nconfig = "default"\narchive = "no"', "archive must be true or false"),
        ('group = "audit/"\nconfig = "default"\narchive = false', "archive applies to logs"),
    ],
)
def test_bad_archive_settings_are_refused(rule: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(f"[[log.match]]\n{rule}\n")

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streamcore.config import (
    LogDefaults,
    StreamcoreConfig,
    load_config,
    parse_cron_schedule,
    parse_duration_ms,
    project_root,
    streamcore_home,
)
from streamcore.errors import ConfigError
from streamcore.runs import record_path

DAY = 86_400_000


@pytest.fixture
def toml_file(tmp_path: Path) -> Callable[[str], Path]:
    """`toml_file(text)` writes a configuration file and returns its path."""

    def write(text: str) -> Path:
        path = tmp_path / "streamcore.toml"
        path.write_text(text)
        return path

    return write


@pytest.fixture
def env(clean_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    return clean_env


FULL = """
home = "/srv/streamcore"
[log]
partitions = 8
retention = "2d"
segment_bytes = 1048576
segment_roll = "12h"
fsync = "batch"
max_record_bytes = 2048
[codec]
default = "json"
schemas_dir = "/opt/schemas"
schema_registry_url = "http://registry:8081"
"""


class TestDurations:
    @pytest.mark.parametrize(
        ("text", "ms"),
        [
            ("4d", 4 * DAY),
            ("12h", 12 * 3_600_000),
            ("5m", 300_000),
            ("30s", 30_000),
            ("500ms", 500),
            ("30", 30_000),
            (" 2 s ", 2_000),
            ("0", 0),
            (1500, 1500),
        ],
    )
    def test_parse(self, text: str | int, ms: int) -> None:
        assert parse_duration_ms(text) == ms

    @pytest.mark.parametrize("text", ["4 days", "1.5h", "-1s", "", "d", "10w", "ms500"])
    def test_invalid_duration_names_the_setting_and_the_fix(self, text: str) -> None:
        with pytest.raises(
            ConfigError, match=r"invalid log\.retention .*use a number with a unit ms\|s\|m\|h\|d"
        ):
            parse_duration_ms(text, "log.retention")


class TestFile:
    def test_values_from_toml(self, env: pytest.MonkeyPatch, toml_file) -> None:
        config = load_config(toml_file(FULL))
        assert config.home == Path("/srv/streamcore")
        assert config.log == LogDefaults(
            partitions=8,
            retention_ms=2 * DAY,
            segment_bytes=1048576,
            segment_roll_ms=12 * 3_600_000,
            fsync="batch",
            max_record_bytes=2048,
        )
        assert config.default_codec == "json"
        assert config.schemas_dir == Path("/opt/schemas")
        assert config.schema_registry_url == "http://registry:8081"
        assert config.log_dir == Path("/srv/streamcore/log")
        assert config.registry_dir == Path("/srv/streamcore/schema-registry")
        assert config.source == toml_file(FULL)

    def test_defaults_for_missing_keys(self, env: pytest.MonkeyPatch, toml_file) -> None:
        config = load_config(toml_file(""))
        assert config.log == LogDefaults()
        assert config.log.retention_ms == 4 * DAY
        assert config.log.fsync == "none"
        assert config.log.partitions == 4
        assert config.default_codec == "avro"
        assert config.schemas_dir == project_root() / "include" / "schemas"

    def test_relative_home_resolves_against_the_project_root(
        self, env: pytest.MonkeyPatch, toml_file, tmp_path: Path
    ) -> None:
        env.chdir(tmp_path)
        assert load_config(toml_file('home = "./somewhere"')).home == project_root() / "somewhere"

    def test_relative_schemas_dir_resolves_against_project_root(
        self, env: pytest.MonkeyPatch, toml_file
    ) -> None:
        config = load_config(toml_file('[codec]\nschemas_dir = "include/schemas"'))
        assert config.schemas_dir == project_root() / "include" / "schemas"

    def test_project_file_is_valid(self, env: pytest.MonkeyPatch) -> None:
        config = load_config(project_root() / "include" / "streamcore.toml")
        assert config.log.retention_ms == 4 * DAY
        assert config.log.segment_roll_ms == DAY

    def test_streamcore_config_variable_selects_the_file(
        self, env: pytest.MonkeyPatch, toml_file
    ) -> None:
        env.setenv("STREAMCORE_CONFIG", str(toml_file(FULL)))
        assert load_config().log.partitions == 8

    def test_streamcore_config_pointing_nowhere(self, env: pytest.MonkeyPatch, tmp_path) -> None:
        env.setenv("STREAMCORE_CONFIG", str(tmp_path / "missing.toml"))
        with pytest.raises(ConfigError, match=r"STREAMCORE_CONFIG points to .*missing\.toml"):
            load_config()

    def test_bad_toml_syntax(self, env: pytest.MonkeyPatch, toml_file) -> None:
        with pytest.raises(ConfigError, match=r"cannot read config .*fix the TOML syntax"):
            load_config(toml_file("[log\npartitions = 3"))

    def test_section_that_is_not_a_table(self, env: pytest.MonkeyPatch, toml_file) -> None:
        with pytest.raises(ConfigError, match=r"\[log\] .* must be a table"):
            load_config(toml_file('log = "fast"'))

    def test_keyword_overrides_win_over_everything(
        self, env: pytest.MonkeyPatch, toml_file, tmp_path: Path
    ) -> None:
        env.setenv("STREAMCORE_HOME", "/from/env")
        config = load_config(toml_file(FULL), home=tmp_path / "h", default_codec="avro-json")
        assert config.home == tmp_path / "h"
        assert config.default_codec == "avro-json"


class TestEnvironment:
    def test_env_overrides_toml(self, env: pytest.MonkeyPatch, toml_file, tmp_path: Path) -> None:
        env.setenv("STREAMCORE_LOG_FSYNC", "always")
        env.setenv("STREAMCORE_HOME", str(tmp_path / "home"))
        env.setenv("STREAMCORE_LOG_RETENTION", "500ms")
        env.setenv("STREAMCORE_LOG_SEGMENT_ROLL", "1h")
        env.setenv("STREAMCORE_LOG_PARTITIONS", "3")
        env.setenv("STREAMCORE_LOG_SEGMENT_BYTES", "8192")
        env.setenv("STREAMCORE_LOG_MAX_RECORD_BYTES", "99")
        env.setenv("STREAMCORE_CODEC_DEFAULT", "avro-binary")
        config = load_config(toml_file(FULL))
        assert config.log == LogDefaults(
            partitions=3,
            retention_ms=500,
            segment_bytes=8192,
            segment_roll_ms=3_600_000,
            fsync="always",
            max_record_bytes=99,
        )
        assert config.home == tmp_path / "home"
        assert config.default_codec == "avro-binary"

    def test_env_value_is_case_insensitive_for_fsync(
        self, env: pytest.MonkeyPatch, toml_file
    ) -> None:
        env.setenv("STREAMCORE_LOG_FSYNC", "ALWAYS")
        assert load_config(toml_file("")).log.fsync == "always"

    def test_env_works_without_file_keys(self, env: pytest.MonkeyPatch, toml_file) -> None:
        env.setenv("STREAMCORE_LOG_RETENTION", "4d")
        assert load_config(toml_file("")).log.retention_ms == 4 * DAY

    @pytest.mark.parametrize(
        ("var", "value", "message"),
        [
            ("STREAMCORE_LOG_FSYNC", "sometimes", r"log\.fsync is 'sometimes'; use one of none, "),
            (
                "STREAMCORE_LOG_PARTITIONS",
                "many",
                r"log\.partitions must be an integer, got 'many'",
            ),
            ("STREAMCORE_LOG_PARTITIONS", "0", r"log\.partitions is 0; use 1\.\.1000"),
            ("STREAMCORE_LOG_PARTITIONS", "1001", r"log\.partitions is 1001; use 1\.\.1000"),
            (
                "STREAMCORE_LOG_SEGMENT_BYTES",
                "100",
                r"log\.segment_bytes is 100; use at least 4096",
            ),
            ("STREAMCORE_LOG_SEGMENT_BYTES", "1MiB", r"log\.segment_bytes must be an integer"),
            ("STREAMCORE_LOG_RETENTION", "4 days", r"invalid log\.retention '4 days': use a"),
            ("STREAMCORE_LOG_SEGMENT_ROLL", "1.5h", r"invalid log\.segment_roll '1\.5h': use a"),
            ("STREAMCORE_LOG_MAX_RECORD_BYTES", "0", r"log\.max_record_bytes is 0; use a positive"),
        ],
    )
    def test_bad_value_names_the_key_and_the_fix(
        self, env: pytest.MonkeyPatch, toml_file, var: str, value: str, message: str
    ) -> None:
        env.setenv(var, value)
        with pytest.raises(ConfigError, match=message):
            load_config(toml_file(""))

    def test_bad_value_in_toml_is_reported_too(self, env: pytest.MonkeyPatch, toml_file) -> None:
        with pytest.raises(ConfigError, match=r"log\.fsync is 'often'"):
            load_config(toml_file('[log]\nfsync = "often"'))


class TestHome:
    """One STREAMCORE_HOME for every process: data/ under the project root by default, relative
    values from the file or the environment against the project root, whatever the working
    directory (DAG processes, Spark drivers and the CLI each run in their own)."""

    def test_project_root_holds_the_package_and_include(self) -> None:
        root = project_root()
        assert root.is_absolute()
        assert (root / "streamcore" / "config.py").is_file()
        assert (root / "include" / "streamcore.toml").is_file()

    def test_default_is_data_under_the_project_root_from_any_directory(
        self, env: pytest.MonkeyPatch, toml_file, tmp_path: Path
    ) -> None:
        env.chdir(tmp_path)
        assert load_config(toml_file("")).home == project_root() / "data"

    def test_the_project_file_gives_the_default(self, env: pytest.MonkeyPatch, tmp_path) -> None:
        env.chdir(tmp_path)
        assert load_config(project_root() / "include" / "streamcore.toml").home == (
            project_root() / "data"
        )

    def test_empty_variable_is_the_default(self, env: pytest.MonkeyPatch, toml_file) -> None:
        env.setenv("STREAMCORE_HOME", "")
        assert load_config(toml_file("")).home == project_root() / "data"

    def test_relative_variable_resolves_against_the_project_root(
        self, env: pytest.MonkeyPatch, toml_file, tmp_path: Path
    ) -> None:
        env.chdir(tmp_path)
        env.setenv("STREAMCORE_HOME", "scratch/home")
        assert load_config(toml_file("")).home == project_root() / "scratch" / "home"

    def test_override_resolves_against_the_working_directory(
        self, env: pytest.MonkeyPatch, toml_file, tmp_path: Path
    ) -> None:
        env.chdir(tmp_path)
        assert load_config(toml_file(""), home="here").home == tmp_path / "here"

    @pytest.mark.parametrize("variable", [None, "", "relative/home", "/srv/streamcore"])
    @pytest.mark.parametrize("file_home", [None, "./data", "elsewhere", "/srv/from-file"])
    def test_run_records_and_the_configuration_agree(
        self,
        env: pytest.MonkeyPatch,
        tmp_path: Path,
        variable: str | None,
        file_home: str | None,
    ) -> None:
        """What the DAGs and the UI plugin use (streamcore.runs) is what the jobs and the CLI
        load, from another working directory than the project."""
        file = tmp_path / "streamcore.toml"
        file.write_text("" if file_home is None else f'home = "{file_home}"\n')
        env.setenv("STREAMCORE_CONFIG", str(file))
        if variable is not None:
            env.setenv("STREAMCORE_HOME", variable)
        env.chdir(tmp_path)
        home = load_config().home
        assert streamcore_home() == home
        assert record_path("job", "dag", "run") == home / "runs" / "job" / "dag+run.json"
        given = variable or file_home  # the variable wins over the file; "" counts as unset
        assert home == ((project_root() / given).resolve() if given else project_root() / "data")


class TestConfigObject:
    def test_log_defaults_validate_directly(self) -> None:
        with pytest.raises(ConfigError, match=r"log\.fsync is 'x'"):
            LogDefaults(fsync="x")

    def test_config_is_immutable(self, tmp_path: Path) -> None:
        config = StreamcoreConfig(home=tmp_path)
        with pytest.raises(AttributeError):
            config.home = Path("/")  # type: ignore[misc]


class TestCronSchedule:
    """`[audit] schedule`: a cron expression whose runs come at one fixed period, since each
    run's data interval is the period before it."""

    @pytest.mark.parametrize(
        ("cron", "period"),
        [
            ("*/5 * * * *", timedelta(minutes=5)),
            ("* * * * *", timedelta(minutes=1)),
            ("0,30 * * * *", timedelta(minutes=30)),
            ("5/15 * * * *", timedelta(minutes=15)),
            ("0 * * * *", timedelta(hours=1)),
            ("15 */6 * * *", timedelta(hours=6)),
            ("30 2 * * *", timedelta(days=1)),
            ("*/10 * * * 0-7", timedelta(minutes=10)),
            ("0 3 * * MON", timedelta(days=7)),
            ("  0 3 *  * 1 ", timedelta(days=7)),
            ("@hourly", timedelta(hours=1)),
            ("@daily", timedelta(days=1)),
            ("@weekly", timedelta(days=7)),
        ],
    )
    def test_period_is_the_gap_between_the_runs_croniter_gives(
        self, cron: str, period: timedelta
    ) -> None:
        from croniter import croniter  # what Airflow schedules with

        schedule = parse_cron_schedule(cron, "audit.schedule")
        assert schedule.period == period
        runs = croniter(schedule.cron, datetime(2026, 11, 20, tzinfo=UTC))
        times = [runs.get_next(datetime) for _ in range(50)]
        assert {b - a for a, b in itertools.pairwise(times)} == {period}

    @pytest.mark.parametrize(
        ("cron", "message"),
        [
            ("every 5 minutes", r"not a cron expression of 5 fields"),
            ("* * * *", r"not a cron expression of 5 fields"),
            ("0 0 1 * *", r"some days of the month or months only"),
            ("0 0 * 6 *", r"keep day-of-month and month '\*'"),
            ("@monthly", r"only @hourly, @daily, @weekly run at one fixed period"),
            ("*/7 * * * *", r"its runs come 4 to 7 minutes apart"),
            ("0 9,17 * * *", r"480 to 960 minutes apart"),
            ("0 0 * * 1-5", r"1440 to 4320 minutes apart"),
            ("60 * * * *", r"its minute field has '60'; give \*, a number 0\.\.59"),
            ("*/0 * * * *", r"its minute field has '\*/0'"),
            ("5-1 * * * *", r"its minute field has '5-1'"),
            ("mon * * * *", r"its minute field has 'mon'"),
            ("0 24 * * *", r"its hour field has '24'"),
            ("0 0 * * funday", r"its day-of-week field has 'funday'; .*sun\.\.sat"),
        ],
    )
    def test_bad_schedule_names_the_key_and_the_fix(self, cron: str, message: str) -> None:
        pattern = rf"audit\.schedule is '{re.escape(cron)}'.*{message}"
        with pytest.raises(ConfigError, match=pattern):
            parse_cron_schedule(cron, "audit.schedule")

    def test_from_toml_then_environment_checked_when_asked(
        self, env: pytest.MonkeyPatch, toml_file
    ) -> None:
        assert load_config(toml_file("")).audit_schedule.cron == "*/5 * * * *"  # the default
        config = load_config(toml_file('[audit]\nschedule = "0 * * * *"'))
        assert config.audit_schedule.period == timedelta(hours=1)
        env.setenv("STREAMCORE_AUDIT_SCHEDULE", "*/15 * * * *")
        assert config.audit_schedule.period == timedelta(minutes=15)
        # A bad schedule fails whoever asks for it, not everything that loads the file.
        bad = load_config(toml_file('[audit]\nschedule = "0 0 31 2 *"'))
        env.delenv("STREAMCORE_AUDIT_SCHEDULE")
        with pytest.raises(ConfigError, match=r"audit\.schedule is '0 0 31 2 \*'"):
            bad.audit_schedule  # noqa: B018

    def test_project_file_runs_every_five_minutes(self, env: pytest.MonkeyPatch) -> None:
        schedule = load_config(project_root() / "include" / "streamcore.toml").audit_schedule
        assert (schedule.cron, schedule.period) == ("*/5 * * * *", timedelta(minutes=5))

"""`[state]` of include/streamcore.toml: the default engine and the lock timeout, from the file,
the environment (STREAMCORE_STATE_*) or the defaults, and a `ConfigError` naming the key and the
values it takes for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamcore.config import StreamcoreConfig, load_config, project_root
from streamcore.errors import ConfigError


def _config(tmp_path: Path, text: str) -> StreamcoreConfig:
    path = tmp_path / "streamcore.toml"
    path.write_text(text)
    return load_config(path)


def test_defaults_when_absent(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    assert config.state_engine == "rocksdb"
    assert config.state_lock_timeout == 30.0


def test_the_project_file_sets_them() -> None:
    config = load_config(project_root() / "include" / "streamcore.toml")
    assert config.state_engine == "rocksdb"
    assert config.state_lock_timeout == 30.0


def test_values_from_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, '[state]\nengine = "memory"\nlock_timeout = 2.5\n')
    assert config.state_engine == "memory"
    assert config.state_lock_timeout == 2.5
    monkeypatch.setenv("STREAMCORE_STATE_ENGINE", "rocksdb")
    monkeypatch.setenv("STREAMCORE_STATE_LOCK_TIMEOUT", "0")
    assert config.state_engine == "rocksdb"
    assert config.state_lock_timeout == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[state]\nengine = "lmdb"', r"state.engine is 'lmdb'; use one of 'memory', 'rocksdb'"),
        ("[state]\nengine = 3", r"state.engine is 3"),
        ("[state]\nlock_timeout = -1", r"state.lock_timeout is -1; give a number of seconds"),
        ('[state]\nlock_timeout = "soon"', r"state.lock_timeout is 'soon'"),
        ("[state]\nlock_timeout = true", r"state.lock_timeout is True"),
        ("[state]\nlock_timeout = inf", r"state.lock_timeout is inf"),
        ('state = "fast"', r"\[state\] in the config file must be a table"),
    ],
)
def test_a_bad_value_names_the_key_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    config = _config(tmp_path, text)  # checked when asked, as [audit] and [backfill]
    with pytest.raises(ConfigError, match=message):
        config.state_engine  # noqa: B018
        config.state_lock_timeout  # noqa: B018

"""`${NAME}` in configuration values, replaced from the environment of the process that loads
the configuration, so that credentials stay out of the file.

In a string value that a backend substitutes (a kafka config's `[log.configs.<name>.properties]`),
`${NAME}` is replaced by the variable `NAME`, `${NAME:-default}` by `default` when `NAME` is unset
or empty, and `$${` is a literal `${` (in a run of `$` before `{`, `$$` is one `$`: `$${NAME}` is
`${NAME}`, `$$${NAME}` is `$` then the value; any other `$` stays). `NAME` unset (or empty: CI
systems pass a missing secret as an empty string) without a default raises `ConfigError` naming
the variable, the property and the config, and the fix. The variables are read when the file is
loaded (`LogConfig.parse` / `load`, with `environ`), in the process that loads it: for a Spark job
that is the driver, and the resolved values travel in the log's description
(`KafkaLogDescription.properties` -> `kafka.sasl.jaas.config`), so executors need no such
variable. An unset variable in a config that no call can reach (not `default`, no rule's, not
the forced one) fails only when that config is opened (`Unresolved`), not at load: a file naming
`${KAFKA_PASSWORD}` still loads where the Kafka config is not used (`STREAMCORE_LOG_BACKEND=memory`
in tests). A malformed reference (`${}`, `${1X}`, an unclosed `${`) is an error at load, always.
Resolved values are secrets like written ones: reprs show `***` for passwords, secrets, tokens,
JAAS configs and private keys (`streamcore.redact.redact_properties`), and no error message
shows a property's value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from streamcore.errors import ConfigError

__all__ = ["Unresolved", "UnsetVariable", "substitute"]

# A run of "$" before "{": each "$$" is a literal "$"; an odd run ends with a reference "${".
_DOLLARS_BRACE = re.compile(r"(\$+)\{")
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_REFERENCE_SYNTAX = (
    "write ${NAME} or ${NAME:-default} (NAME: letters, digits and _, not starting with a digit; "
    'a default holds no "}" and no "${"), or $${ for a literal "${"'
)


class UnsetVariable(ConfigError):
    """A `${NAME}` whose variable is unset or empty, with no default."""

    def __init__(self, message: str, variable: str) -> None:
        super().__init__(message)
        self.variable = variable


class Unresolved(Mapping[str, Any]):
    """Option values of a config that no call can reach and whose `${NAME}` is not set: loading
    the file does not fail for a config it does not open; reading them (opening the backend,
    e.g. `KafkaLogManager(config=...)`) raises the `ConfigError` of the missing variable."""

    def __init__(self, error: UnsetVariable) -> None:
        self.message = str(error)
        self.variable = error.variable

    def _raise(self) -> Any:
        raise ConfigError(self.message)

    def __getitem__(self, key: str) -> Any:
        return self._raise()

    def __iter__(self) -> Any:
        return self._raise()

    def __len__(self) -> int:
        return int(self._raise())

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<unresolved: ${{{self.variable}}}, its variable is unset or empty>"


def substitute(text: str, env: Mapping[str, str], where: str) -> str:
    """`text` with `${NAME}` / `${NAME:-default}` replaced from `env`; before a `{`, `$$` is a
    literal `$` (`$${X}` -> `${X}`, `$$${X}` -> `$` + X). Other `$` stay as written. Messages name
    the variable and `where` (the property), never the value."""
    out: list[str] = []
    pos = 0
    while (match := _DOLLARS_BRACE.search(text, pos)) is not None:
        dollars = len(match.group(1))
        out.append(text[pos : match.start()] + "$" * (dollars // 2))
        pos = match.end()
        if dollars % 2 == 0:  # escaped: a literal "{"
            out.append("{")
            continue
        close = text.find("}", pos)
        parsed = _VARIABLE.fullmatch(text[pos:close]) if close >= 0 else None
        if parsed is None or "${" in (parsed.group(2) or ""):
            raise ConfigError(
                f'{where} holds a "${{" that is not a variable reference; {_REFERENCE_SYNTAX}'
            )
        out.append(lookup(parsed.group(1), parsed.group(2), env, where))
        pos = close + 1
    out.append(text[pos:])
    return "".join(out)


def lookup(variable: str, default: str | None, env: Mapping[str, str], where: str) -> str:
    value = env.get(variable, "")
    if value:
        return value
    if default is not None:
        return default
    state = "is set but empty" if variable in env else "is not set"
    raise UnsetVariable(
        f"{where} takes ${{{variable}}} from the environment, but the environment variable "
        f"{variable} {state}; export {variable} in the environment of the process that loads "
        "the config (the shell, the Airflow worker, the Spark driver: executors get the "
        f'resolved value), or give a default: "${{{variable}:-default}}"',
        variable,
    )

"""Schema registries: where the `avro-confluent` codec turns schemas into 4-byte ids and back.

Confluent-framed messages carry a registry id instead of a fingerprint, so writer and reader must
share a registry. `FileSchemaRegistry` keeps it in one JSON file under `config.registry_dir` (no
server to run, safe for several processes on one host); `ConfluentSchemaRegistry` puts the same
small interface in front of a real Confluent Schema Registry when `codec.schema_registry_url` is
set. `open_registry(config)` picks one.

A registry URL may carry credentials (`https://user:secret@host`): they go to the client as
basic-auth settings, never inside a URL it could log, and the URL shown in reprs, errors and
logs is redacted (`https://user:***@host`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit, urlunsplit

from streamcore.codecs.errors import ConflictingCredentialsError
from streamcore.codecs.fingerprint import format_fingerprint
from streamcore.codecs.parsed_schema import ParsedSchema, load_schema
from streamcore.errors import CodecError, SchemaNotFoundError
from streamcore.redact import redact_credentials

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig

__all__ = [
    "ConfluentSchemaRegistry",
    "FileSchemaRegistry",
    "SchemaRegistry",
    "open_registry",
]

logger = logging.getLogger(__name__)

CODEC = "avro-confluent"
REGISTRY_FILE = "registry.json"
LOCK_FILE = ".lock"
FORMAT_VERSION = 1
FIRST_ID = 1  # Confluent ids start at 1; 0 would read as "no schema" to some tools


@runtime_checkable
class SchemaRegistry(Protocol):
    """The two calls the `avro-confluent` codec needs."""

    def register(self, subject: str, schema: Any) -> int:
        """The id of `schema` under `subject`, registering it if new (idempotent)."""

    def get(self, schema_id: int) -> ParsedSchema:
        """The schema with that id; `SchemaNotFoundError` if there is none."""


class FileSchemaRegistry:
    """A schema registry kept in `<dir>/registry.json`, shared by every process on the host.

    Ids are global (one id per canonical schema, whatever the subject, as in Confluent's
    registry) and allocated under an exclusive `flock` of `<dir>/.lock`, so two processes never
    hand out the same id; the file is replaced atomically (write a temp file, fsync, rename), so a
    reader never sees half of it. Registering the same canonical schema again returns its id.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / REGISTRY_FILE
        self._ids: dict[str, int] = {}  # canonical form -> id
        self._schemas: dict[int, ParsedSchema] = {}
        self._subjects: dict[str, list[int]] = {}
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"FileSchemaRegistry({str(self.directory)!r})"

    # -- file access -------------------------------------------------------------------------

    def _read_file(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"format": FORMAT_VERSION, "next_id": FIRST_ID, "schemas": {}, "subjects": {}}
        except OSError as exc:
            raise CodecError(CODEC, f"cannot read schema registry {self.path}: {exc}") from exc
        try:
            content = json.loads(text)
            if not isinstance(content, dict) or content.get("format") != FORMAT_VERSION:
                raise self._corrupt("unknown layout")
            content["schemas"] = {int(k): v for k, v in content["schemas"].items()}
            return content
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self._corrupt(str(exc)) from exc

    def _corrupt(self, reason: str) -> CodecError:
        return CodecError(
            CODEC,
            f"schema registry file {self.path} is corrupt ({reason}); restore it from a backup "
            "-- deleting it renumbers schemas and orphans every message already written",
        )

    def _refresh(self, content: dict[str, Any]) -> None:
        """Load what the file says into the in-memory indexes (parsing only new schemas)."""
        for schema_id, entry in content["schemas"].items():
            if schema_id not in self._schemas:
                parsed = load_schema(
                    entry["schema"], codec=CODEC, source=f"{self.path}#{schema_id}"
                )
                self._schemas[schema_id] = parsed
                self._ids[parsed.canonical] = schema_id
        self._subjects = {s: list(ids) for s, ids in content["subjects"].items()}

    def _write_file(self, content: dict[str, Any]) -> None:
        serializable = dict(content, schemas={str(k): v for k, v in content["schemas"].items()})
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".registry-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(serializable, out, indent=1, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = open(self.directory / LOCK_FILE, "a+b")  # noqa: SIM115 -- closed below
        except OSError as exc:
            raise CodecError(
                CODEC, f"cannot create the schema registry in {self.directory}: {exc}"
            ) from exc
        with lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    # -- API -------------------------------------------------------------------------------

    def register(self, subject: str, schema: Any) -> int:
        """The id of `schema`, allocating the next free id under the file lock if it is new."""
        parsed = load_schema(schema, codec=CODEC)
        with self._mutex:
            known = self._ids.get(parsed.canonical)
            if known is not None and known in self._subjects.get(subject, ()):
                return known
            with self._locked():
                content = self._read_file()
                self._refresh(content)
                schema_id = self._ids.get(parsed.canonical)
                changed = False
                if schema_id is None:
                    schema_id = int(content["next_id"])
                    content["next_id"] = schema_id + 1
                    content["schemas"][schema_id] = {
                        "fingerprint": format_fingerprint(parsed.fingerprint),
                        "schema": parsed.raw,
                    }
                    changed = True
                versions = content["subjects"].setdefault(subject, [])
                if schema_id not in versions:
                    versions.append(schema_id)
                    changed = True
                if changed:
                    self._write_file(content)
                    self._refresh(content)
                    logger.info(
                        "registered %s under subject %r as id %d in %s",
                        parsed.label,
                        subject,
                        schema_id,
                        self.path,
                    )
            return schema_id

    def get(self, schema_id: int) -> ParsedSchema:
        """The schema of an id, re-reading the file once if another process may have added it."""
        schema = self._schemas.get(schema_id)
        if schema is not None:
            return schema
        with self._mutex:
            self._refresh(self._read_file())
        schema = self._schemas.get(schema_id)
        if schema is None:
            raise SchemaNotFoundError(
                CODEC,
                f"schema id {schema_id} is not in the schema registry {self.path}; the message "
                "was written against another registry (check codec.schema_registry_url and home)",
            )
        return schema

    def subjects(self) -> dict[str, list[int]]:
        """Subject -> ids in registration order (a fresh read of the file)."""
        with self._mutex:
            self._refresh(self._read_file())
            return {s: list(ids) for s, ids in self._subjects.items()}


@dataclass(frozen=True)
class _AvroSchemaText:
    """Stand-in for `confluent_kafka.schema_registry.Schema` when that module cannot load.

    Only reachable with an injected client (tests): a real client needs the real module.
    """

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[Any, ...] = ()


def _confluent_schema(text: str) -> Any:
    try:
        from confluent_kafka.schema_registry import Schema
    except ImportError:
        return _AvroSchemaText(text)
    return Schema(text, "AVRO")


class ConfluentSchemaRegistry:
    """`SchemaRegistry` over `confluent_kafka.schema_registry.SchemaRegistryClient`.

    Needs the `schemaregistry` extra of confluent-kafka (authlib, httpx2, attrs, cachetools).
    Ids and schemas are cached in process: registry ids are immutable.
    """

    def __init__(
        self, url: str | None = None, *, client: Any = None, conf: dict[str, Any] | None = None
    ) -> None:
        self.url = redact_credentials(url) if url else url  # the only form kept: for messages
        if client is None:
            if not url:
                raise CodecError(CODEC, "ConfluentSchemaRegistry needs a url or a client")
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:
                raise CodecError(
                    CODEC,
                    f"codec.schema_registry_url is set but confluent_kafka.schema_registry cannot "
                    f"be imported ({exc}); install the kafka extra (pip install "
                    "'streamcore[kafka]') or clear the url to use the file registry",
                ) from exc
            settings = {"url": url, **(conf or {})}
            try:
                settings.update(_without_credentials(url, settings))
                client = SchemaRegistryClient(settings)
            except Exception as exc:  # ValueError, TypeError: a url or setting it rejects
                reason = redact_credentials(f"{type(exc).__name__}: {exc}")
                raise CodecError(
                    CODEC,
                    f"cannot use the schema registry at {self.url} ({reason}); fix "
                    "codec.schema_registry_url (http(s)://[user:password@]host:port)",
                ) from None
        self.client = client
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, ParsedSchema] = {}

    def __repr__(self) -> str:
        return f"ConfluentSchemaRegistry({self.url!r})"

    def _failure(self, what: str, exc: Exception) -> CodecError:
        status = getattr(exc, "http_status_code", None)
        where = f"schema registry {self.url or self.client!r}"
        if status == 404:
            reason = f"{what}: not found in {where} ({exc})"
            return SchemaNotFoundError(CODEC, redact_credentials(reason))
        reason = f"{what} failed at {where}: {type(exc).__name__}: {exc}"
        return CodecError(CODEC, redact_credentials(reason))

    def register(self, subject: str, schema: Any) -> int:
        parsed = load_schema(schema, codec=CODEC)
        key = (subject, parsed.canonical)
        schema_id = self._ids.get(key)
        if schema_id is None:
            try:
                schema_id = int(
                    self.client.register_schema(subject, _confluent_schema(parsed.to_json()))
                )
            except CodecError:
                raise
            except Exception as exc:  # the client raises SchemaRegistryError, httpx errors...
                raise self._failure(f"registering {parsed.label} under {subject!r}", exc) from exc
            self._ids[key] = schema_id
            self._schemas.setdefault(schema_id, parsed)
        return schema_id

    def get(self, schema_id: int) -> ParsedSchema:
        schema = self._schemas.get(schema_id)
        if schema is None:
            try:
                found = self.client.get_schema(schema_id)
            except Exception as exc:
                raise self._failure(f"fetching schema id {schema_id}", exc) from exc
            kind = getattr(found, "schema_type", None) or "AVRO"
            if kind != "AVRO":
                raise CodecError(
                    CODEC, f"schema id {schema_id} is a {kind} schema, not Avro; wrong topic?"
                )
            schema = load_schema(found.schema_str, codec=CODEC)
            self._schemas[schema_id] = schema
        return schema


def _without_credentials(url: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Client settings with the user info of `url` (a comma-separated list) moved out of it into
    `basic.auth.user.info`, so the client never logs or reports a URL holding a password."""
    bases, userinfo = [], None
    for part in url.split(","):
        parsed = urlsplit(part.strip())
        if "@" in parsed.netloc:
            user, _, password = parsed.netloc.rpartition("@")[0].partition(":")
            userinfo = userinfo or f"{unquote(user)}:{unquote(password)}"
            parsed = parsed._replace(netloc=parsed.netloc.rpartition("@")[2])
        bases.append(urlunsplit(parsed))
    if userinfo is None:
        return {}
    if "basic.auth.user.info" in settings:
        raise ConflictingCredentialsError(
            "credentials are both in the url and in basic.auth.user.info; keep one"
        )
    return {"url": ",".join(bases), "basic.auth.user.info": userinfo}


def open_registry(config: StreamcoreConfig | None = None) -> SchemaRegistry:
    """The Confluent registry at `config.schema_registry_url`, else the file registry."""
    if config is None:
        from streamcore.config import load_config

        config = load_config()
    if config.schema_registry_url:
        return ConfluentSchemaRegistry(config.schema_registry_url)
    return FileSchemaRegistry(config.registry_dir)

"""`KafkaLogManager` and its appender (see the package docstring for the mapping and the
differences with the local log)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import NewTopic, OffsetSpec

from streamcore.config import parse_duration_ms
from streamcore.errors import (
    ConfigError,
    InvalidArgumentError,
    LogExistsError,
    LogNotFoundError,
    PartitionNotFoundError,
)
from streamcore.log.api import LogManager, LogTailer, RebalanceListener
from streamcore.log.kafka.appender import KafkaAppender
from streamcore.log.kafka.client import KafkaClients
from streamcore.log.kafka.description import BACKEND, KafkaLogDescription
from streamcore.log.registry import check_partitions
from streamcore.log.values import LiveMember, LogInfo, LogPartition, check_start
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.kafka.transaction import KafkaTransactions

__all__ = ["KafkaLogManager"]

logger = logging.getLogger(__name__)
_CREATE_OPTIONS = ("replication_factor", "retention", "topic_config")


class KafkaLogManager(LogManager):
    """Logs as Kafka topics. Topic = `topic_prefix` + `Name.id` (`streamcore-bulk-command`);
    consumer group id = `topic_prefix` + group `Name.id` likewise. `config` holds librdkafka
    properties (SASL, SSL, `client.id`, ...) given to every client this manager makes; they win
    over the defaults. `timeout` (s) bounds every broker operation: an unreachable broker raises
    `BrokerUnavailableError` within it. `partitions` and `replication_factor` apply to topics
    `create` makes without explicit values."""

    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        topic_prefix: str = "streamcore-",
        config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
        replication_factor: int = 1,
        partitions: int = 4,
    ) -> None:
        self.clients = KafkaClients(bootstrap_servers, config or {}, timeout, topic_prefix)
        self.bootstrap_servers = self.clients.bootstrap
        self.topic_prefix = topic_prefix
        self.timeout = float(timeout)
        self.replication_factor = int(replication_factor)
        self.default_partitions = int(partitions)
        self._tailers: dict[tuple[str, LogPartition], Any] = {}  # a tailer, or a claim
        self._subscribed: list[LogTailer[Any]] = []
        self._appenders: list[KafkaAppender] = []
        self._transactions: list[KafkaTransactions] = []
        self._lock = threading.RLock()
        self._closed = False

    def __repr__(self) -> str:
        return f"KafkaLogManager({self.bootstrap_servers!r}, topic_prefix={self.topic_prefix!r})"

    # -- naming ---------------------------------------------------------------------------------
    # The clients own the names (and the offsets): the tailer and the appender use them.
    def topic(self, name: str | Name) -> str:
        """The topic of a log: prefix + name id."""
        return self.clients.topic(name)

    def group_id(self, group: str | Name) -> str:
        """The Kafka consumer group id of a streamcore group: prefix + group id."""
        return self.clients.group_id(group)

    def _check_open(self) -> None:
        self.clients.check_open()

    def _admin(self) -> Any:
        admin = self.clients.admin()
        admin.poll(0)  # serve queued librdkafka log lines
        return admin

    # -- logs -----------------------------------------------------------------------------------
    def _metadata(self, name: str | Name) -> Any:
        """Topic metadata, or None if the topic does not exist."""
        topic = self.topic(name)
        with self.clients.errors(f"cannot read the metadata of {topic}", topic):
            md = self._admin().list_topics(topic=topic, timeout=self.timeout)
        found = md.topics.get(topic)
        if found is None or found.error is not None:
            if found is not None and found.error.code() not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError.UNKNOWN_TOPIC_ID,
            ):
                raise self.clients.translate(found.error, f"metadata of {topic}", topic)
            return None
        return found

    def exists(self, name: str | Name) -> bool:
        return self._metadata(name) is not None

    def _not_found(self, name: str | Name) -> LogNotFoundError:
        name = Name.of(name)
        return LogNotFoundError(
            f"log {name} does not exist in Kafka at {self.bootstrap_servers} (topic "
            f"{self.topic(name)}); create it first (LogManager.create or `streamcore create -l "
            f"{name}`)"
        )

    def size(self, name: str | Name) -> int:
        md = self._metadata(name)
        if md is None:
            raise self._not_found(name)
        return len(md.partitions)

    def incarnation(self, name: str | Name) -> str | None:
        """The topic id (Kafka gives a topic a new one when it is created again), base64 as the
        Kafka tools print it."""
        name = Name.of(name)
        topic = self.topic(name)
        what = f"cannot describe topic {topic}"
        try:
            with self.clients.errors(what, topic):
                future = self._admin().describe_topics(
                    TopicCollection([topic]), request_timeout=self.timeout
                )[topic]
            topic_id = self.clients.result(what, future, topic).topic_id
        except LogNotFoundError:
            raise self._not_found(name) from None
        # Brokers without topic ids (before Kafka 2.8) answer with the zero id: unknown.
        if topic_id is None or not (
            topic_id.get_most_significant_bits() or topic_id.get_least_significant_bits()
        ):
            return None
        return str(topic_id)

    def create(self, name: str | Name, partitions: int | None = None, **options: Any) -> bool:
        """Create the topic. Options: `replication_factor` (default: the manager's),
        `retention` ("7d", ms; default: the broker's `log.retention.*`), `topic_config` (a dict
        of raw topic configs, e.g. {"cleanup.policy": "compact"})."""
        name = Name.of(name)
        explicit = partitions is not None
        count = self.default_partitions if partitions is None else int(partitions)
        check_partitions(name, count)
        unknown = set(options) - set(_CREATE_OPTIONS)
        if unknown:
            raise ConfigError(
                f"unknown Kafka log option(s) {sorted(unknown)}; use {', '.join(_CREATE_OPTIONS)}"
            )
        replication = int(options.get("replication_factor", self.replication_factor))
        topic_config = {str(k): str(v) for k, v in dict(options.get("topic_config", {})).items()}
        if "retention" in options:
            topic_config["retention.ms"] = str(parse_duration_ms(options["retention"]))
        self._check_open()
        topic = self.topic(name)
        existing = self._metadata(name)
        if existing is None:
            future = self._admin().create_topics(
                [NewTopic(topic, count, replication, config=topic_config)],
                request_timeout=self.timeout,
            )[topic]
            try:
                self.clients.result(f"cannot create topic {topic}", future, topic)
            except Exception as exc:
                cause = exc.__cause__
                error = cause.args[0] if isinstance(cause, KafkaException) else None
                if not (
                    isinstance(error, KafkaError)
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
                ):
                    raise
                existing = self._wait_metadata(name, lambda md: md is not None)
            else:
                self._wait_metadata(
                    name,
                    lambda md: (
                        md is not None
                        and len(md.partitions) == count
                        and all(p.leader >= 0 for p in md.partitions.values())
                    ),
                )
                self._wait_leaders(name, count)
                return True
        size = len(existing.partitions)
        if explicit and size != count:
            raise LogExistsError(
                f"log {name} exists with {size} partitions, not {count}; delete it first or use "
                "its current size"
            )
        return False

    def _wait_leaders(self, name: Name, count: int) -> None:
        """Return once every partition leader answers ListOffsets. A produce that reaches a
        partition a moment too early is retried by librdkafka, and with several requests in
        flight the idempotent producer may then get a success without an offset for a record
        the broker did not keep (seen with librdkafka 2.16 / Kafka 4.2, about 1 new topic in
        15 under concurrent appends); a ready partition avoids that path."""
        topic = self.topic(name)
        tps = [TopicPartition(topic, p) for p in range(count)]
        deadline = time.monotonic() + self.timeout
        while True:
            futures = self._admin().list_offsets(
                {tp: OffsetSpec.latest() for tp in tps}, request_timeout=self.timeout
            )
            try:
                for future in futures.values():
                    future.result(timeout=self.timeout)
                return
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise self.clients.translate(exc, f"partitions of {topic}", topic) from exc
            time.sleep(0.01)

    def _wait_metadata(self, name: Name, ready: Any) -> Any:
        """Metadata once `ready(metadata)` holds: the broker learns topic changes from the
        controller a moment after the admin call returns."""
        deadline = time.monotonic() + self.timeout
        while True:
            md = self._metadata(name)
            if ready(md):
                return md
            if time.monotonic() > deadline:
                raise self.clients.unavailable(
                    f"topic {self.topic(name)}", "metadata did not settle after a change"
                )
            time.sleep(0.01)

    def delete(self, name: str | Name) -> bool:
        """Delete the topic; returns once the broker forgot it and the offsets committed on it
        by the groups of this prefix. Raises `LogExistsError` while this manager has an open
        appender or tailer on it."""
        name = Name.of(name)
        self._check_open()
        md = self._metadata(name)
        if md is None:
            return False
        with self._lock:
            busy = [k for k in self._tailers if k[1].name == name]
            if busy or any(a.name == name and not a.closed for a in self._appenders):
                raise LogExistsError(
                    f"log {name} is in use in this process (appender or tailer open); close them "
                    "before deleting it"
                )
        topic = self.topic(name)
        partitions = [TopicPartition(topic, p) for p in md.partitions]
        groups = self._groups_with_offsets(topic, partitions)
        future = self._admin().delete_topics([topic], request_timeout=self.timeout)[topic]
        try:
            self.clients.result(f"cannot delete topic {topic}", future, topic)
        except LogNotFoundError:
            return False
        self._wait_metadata(name, lambda m: m is None)
        # The group coordinator drops the offsets of a deleted topic a moment later; wait for it,
        # so that a new log of the same name does not resume from them.
        deadline = time.monotonic() + self.timeout
        while groups and time.monotonic() < deadline:
            groups = [
                g
                for g in groups
                if any(o is not None for o in self.clients.group_offsets(g, partitions))
            ]
            if groups:
                time.sleep(0.02)
        if groups:
            logger.warning("offsets of %s on deleted topic %s are still there", groups, topic)
        return True

    def list_logs(self) -> list[Name]:
        with self.clients.errors("cannot list topics"):
            md = self._admin().list_topics(timeout=self.timeout)
        names = [self.clients.name_of(t) for t in md.topics]
        return sorted((n for n in names if n is not None), key=lambda n: n.urn)

    def _our_groups(self) -> list[str]:
        future = self._admin().list_consumer_groups(request_timeout=self.timeout)
        result = self.clients.result("cannot list consumer groups", future)
        if result.errors and not result.valid:
            raise self.clients.translate(result.errors[0], "cannot list consumer groups")
        return sorted(g.group_id for g in result.valid if g.group_id.startswith(self.topic_prefix))

    def _groups_with_offsets(self, topic: str, partitions: list[TopicPartition]) -> list[str]:
        return [
            g
            for g in self._our_groups()
            if any(o is not None for o in self.clients.group_offsets(g, partitions))
        ]

    def list_groups(self, name: str | Name) -> list[str]:
        """Groups of this prefix with a committed offset on the log. A group that reads by
        static assignment appears once it committed (Kafka knows nothing else of it)."""
        size = self.size(name)
        topic = self.topic(name)
        partitions = [TopicPartition(topic, p) for p in range(size)]
        out = []
        for group_id in self._groups_with_offsets(topic, partitions):
            group = self.clients.name_of(group_id)
            if group is not None:
                out.append(group.urn)
        return sorted(out)

    def group_members(self, group: str) -> list[LiveMember]:
        """The members the group coordinator lists for the group while it is Stable or
        rebalancing; none for an Empty, Dead (e.g. never used) or unknown group. `host` is the
        client address as the broker sees it (`/10.0.0.7`); `logs` are the logs of the topics
        assigned to the member that have this manager's prefix (empty while a rebalance has not
        assigned anything yet, or for a member of another protocol whose assignment the broker
        does not describe)."""
        group_id = self.group_id(group)

        def call() -> list[LiveMember]:
            future = self._admin().describe_consumer_groups(
                [group_id], request_timeout=self.timeout
            )[group_id]
            try:
                found = future.result(timeout=self.timeout)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                    return []  # what brokers with the consumer protocol (KIP-848) answer
                raise
            if found.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
                return []  # a Dead group is what a classic broker reports for an unknown id
            out = []
            for member in found.members:
                assigned = member.assignment.topic_partitions if member.assignment else []
                names = {self.clients.name_of(tp.topic) for tp in assigned or []}
                logs = tuple(sorted(n.urn for n in names if n is not None))
                out.append(LiveMember(member.member_id, member.host or None, logs))
            return out

        members = self.clients.retry(f"cannot describe consumer group {group_id}", call)
        return sorted(members, key=lambda m: m.member_id)

    # -- offsets --------------------------------------------------------------------------------
    def _partitions(self, name: str | Name) -> list[TopicPartition]:
        topic = self.topic(name)
        return [TopicPartition(topic, p) for p in range(self.size(name))]

    def end_offsets(self, name: str | Name) -> list[int]:
        return self.clients.list_offsets(self._partitions(name), OffsetSpec.latest())

    def start_offsets(self, name: str | Name) -> list[int]:
        return self.clients.list_offsets(self._partitions(name), OffsetSpec.earliest())

    def committed(self, name: str | Name, group: str) -> list[int | None]:
        return self.clients.group_offsets(self.group_id(group), self._partitions(name))

    def commit_position(self, partition: LogPartition, group: str, offset: int) -> None:
        """Set a group's committed position directly (the group must have no live member)."""
        topic = self.topic(partition.name)
        if not 0 <= partition.partition < self.size(partition.name):
            raise PartitionNotFoundError(f"{partition.name} has no partition {partition.partition}")
        group_id = self.group_id(group)
        tp = TopicPartition(topic, partition.partition, offset)
        future = self._admin().alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id, [tp])], request_timeout=self.timeout
        )[group_id]
        result = self.clients.result(f"cannot set the position of {group_id}", future, topic)
        for item in result.topic_partitions:
            if item.error is not None:
                raise self.clients.translate(item.error, f"position of {group_id}", topic)

    def describe(self, name: str | Name) -> KafkaLogDescription:
        name = Name.of(name)
        policy = self.topic_config(name).get("cleanup.policy", "delete")
        return KafkaLogDescription(
            BACKEND,
            name.urn,
            self.size(name),
            bootstrap_servers=self.bootstrap_servers,
            topic=self.topic(name),
            properties=dict(self.clients.user),
            compacted="compact" in policy.split(","),
        )

    def topic_config(self, name: str | Name) -> dict[str, str]:
        """The topic's configs as the broker reports them (`cleanup.policy`, ...)."""
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic(name))
        future = self._admin().describe_configs([resource], request_timeout=self.timeout)
        entries = self.clients.result(f"cannot describe topic {self.topic(name)}", future[resource])
        return {key: entry.value for key, entry in entries.items() if entry.value is not None}

    def record_at(self, partition: LogPartition, offset: int) -> tuple[str, bytes, int] | None:
        topic = self.topic(partition.name)
        if not 0 <= partition.partition < self.size(partition.name):
            raise PartitionNotFoundError(f"{partition.name} has no partition {partition.partition}")
        tp = TopicPartition(topic, partition.partition)
        ((low, high),) = self.clients.watermarks([tp])
        if not low <= offset < high:
            return None
        with self.clients.errors("cannot create a consumer"):
            consumer = Consumer(
                self.clients.consumer_config(
                    self.group_id("admin/record-at"), "streamcore-record-at"
                )
            )
        try:
            with self.clients.errors(f"cannot read the metadata of {topic}", topic):
                consumer.list_topics(topic, timeout=self.timeout)  # else the fetch waits ~1 s
            consumer.assign([TopicPartition(topic, partition.partition, offset)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                        continue
                    raise self.clients.translate(error, f"cannot read {partition}", topic)
                if msg.offset() != offset:
                    return None
                key = (msg.key() or b"").decode("utf-8", "backslashreplace")  # shown, not read
                return key, msg.value() or b"", msg.timestamp()[1]
            raise self.clients.unavailable(f"cannot read {partition}:+{offset}", "no record came")
        finally:
            consumer.close()

    def info(self, name: str | Name) -> LogInfo:
        """Partitions, records, retention; size_bytes is not known to a client (0)."""
        name = Name.of(name)
        parts = self._partitions(name)
        marks = self.clients.watermarks(parts)
        retention = -1
        try:
            retention = int(self.topic_config(name)["retention.ms"])
        except Exception as exc:  # informational only
            logger.debug("retention of %s unknown: %s", name, exc)
        starts = [low for low, _ in marks]
        ends = [high for _, high in marks]
        records = sum(e - s for s, e in marks)
        return LogInfo(name, len(parts), records, 0, retention, starts, ends)

    # -- appenders and tailers ------------------------------------------------------------------
    def appender(self, name: str | Name, codec: Codec[Any] | None = None) -> KafkaAppender:
        self._check_open()
        name = Name.of(name)
        appender = KafkaAppender(self, name, codec, self.size(name))
        with self._lock:
            self._appenders = [a for a in self._appenders if not a.closed]
            self._appenders.append(appender)
        return appender

    def tailer(
        self,
        group: str,
        source: str | Name | LogPartition | Sequence[LogPartition],
        codec: Codec[Any] | None = None,
    ) -> LogTailer[Any]:
        from streamcore.log.kafka.tailer import KafkaTailer

        self._check_open()
        partitions = self.resolve_partitions(source)
        claim = object()  # holds the partitions while the consumer starts (outside the lock)
        with self._lock:
            self._check_open()
            self._ensure_no_live_tailer(self._tailers, group, partitions)
            for p in partitions:
                self._tailers[(group, p)] = claim
        try:
            tailer = KafkaTailer(
                self.clients, group, codec, partitions=partitions, on_close=self._tailer_closed
            )
        except BaseException:
            with self._lock:
                for p in partitions:
                    self._tailers.pop((group, p), None)
            raise
        with self._lock:
            for p in partitions:
                self._tailers[(group, p)] = tailer
            if self._closed:  # closed while the tailer started
                tailer.close()
                self._check_open()
        return tailer

    def subscribe(
        self,
        group: str,
        names: Sequence[str | Name],
        listener: RebalanceListener | None = None,
        codec: Codec[Any] | None = None,
        *,
        start: str = "earliest",
    ) -> LogTailer[Any]:
        """A member of the Kafka consumer group (`subscribe` with the classic protocol's eager
        assignment by default; set `partition.assignment.strategy` or `group.protocol` in
        `config` for another, except with several `names`: those always get the `range`
        assignor, which co-partitions them, see `kafka.tailer.copartitioned`). Partitions are
        assigned during `read()`; `listener` runs there. `start`: `LogManager.subscribe`'s."""
        from streamcore.log.kafka.tailer import KafkaTailer

        check_start(start)
        self._check_open()
        if isinstance(names, str | Name):
            names = [names]
        resolved = [Name.of(n) for n in names]
        if not resolved:
            raise InvalidArgumentError("subscribe needs at least one log name")
        for n in resolved:
            if not self.exists(n):
                raise self._not_found(n)
        with self._lock:
            self._check_open()
            tailer = KafkaTailer(
                self.clients,
                group,
                codec,
                names=resolved,
                listener=listener,
                on_close=self._tailer_closed,
                start=start,
            )
            self._subscribed.append(tailer)
        return tailer

    def transactions(
        self, transactional_id: str, *, transaction_timeout: float | None = None
    ) -> KafkaTransactions:
        """A transactional producer for exactly-once checkpoints (`streamcore.log.kafka.
        transaction`): `transactional.id` = topic prefix + `transactional_id`, a stable id the
        caller gives (group + task). Opening it fences any other producer of that id and
        aborts (or completes) the transaction it left open. Close it, or close the manager."""
        from streamcore.log.kafka.transaction import KafkaTransactions

        self._check_open()
        transactions = KafkaTransactions(
            self, transactional_id, transaction_timeout=transaction_timeout
        )
        with self._lock:
            self._transactions.append(transactions)
        return transactions

    def _transactions_closed(self, transactions: KafkaTransactions) -> None:
        with self._lock:
            self._transactions = [t for t in self._transactions if t is not transactions]

    def _tailer_closed(self, tailer: LogTailer[Any]) -> None:
        with self._lock:
            self._forget_tailer(self._tailers, tailer)
            self._subscribed = [t for t in self._subscribed if t is not tailer]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            tailers = {id(t): t for t in [*self._tailers.values(), *self._subscribed]}
            for tailer in tailers.values():
                if not isinstance(tailer, LogTailer):
                    continue  # a claim of a tailer still starting
                tailer.close()
            for appender in self._appenders:
                appender.close()
            for transactions in list(self._transactions):
                transactions.close()
            self.clients.close()
            self._closed = True

"""confluent-kafka plumbing shared by the Kafka manager, appender and tailer: client settings,
error translation into the streamcore hierarchy, retries of transient coordinator errors, and the
per-process pool of producers and admin clients."""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from streamcore.errors import (
    BrokerAuthenticationError,
    BrokerUnavailableError,
    ConfigError,
    InvalidArgumentError,
    InvalidNameError,
    LogClosedError,
    LogError,
    LogNotFoundError,
    ProducerFencedError,
    StreamcoreError,
)
from streamcore.names import Name

__all__ = ["KafkaClients"]

logger = logging.getLogger(__name__)
# librdkafka's own lines, as a child of this module's logger.
librdkafka_logger = logging.getLogger(f"{__name__}.librdkafka")
T = TypeVar("T")
_READERS = 8  # offsets-reading consumers a manager keeps open (least recently used closed)

# The broker could not be reached, or did not answer in time.
UNAVAILABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError._TIMED_OUT,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION,
}
# Another producer took the transactional id over (or the broker aborted a transaction that
# outlived transaction.timeout.ms and bumped the epoch): this producer can send nothing more.
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
AUTHENTICATION = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
# The last authentication failure librdkafka reported per (bootstrap servers, sasl.username): it
# comes through the error callback while the operation itself only times out, so the timeout
# error looks here to say what really went wrong.
_auth_failures: dict[tuple[str, str], str] = {}
# Worth another try within the timeout: coordinators moving or loading, leaders electing.
TRANSIENT = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


# librdkafka warns when a client gets a property of the other kind; `config` is shared, so each
# client gets the general properties plus those of its kind.
_CONSUMER_ONLY = (
    "group.",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "queued.",
    "fetch.",
    "auto.offset.reset",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "consume.callback.max.messages",
    "coordinator.query.interval.ms",
    "allow.auto.create.topics",
    "max.partition.fetch.bytes",
)
_PRODUCER_ONLY = (
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "queue.buffering.",
    "queuing.strategy",
    "linger.ms",
    "message.send.max.retries",
    "retries",
    "compression.",
    "batch.",
    "delivery.report.only.error",
    "dr_cb",
    "dr_msg_cb",
    "sticky.partitioning.linger.ms",
    "request.required.acks",
    "acks",
    "request.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "partitioner",
    "compression.type",
    "compression.codec",
    "compression.level",
)


def _kind(prop: str) -> str:
    if prop.startswith(_CONSUMER_ONLY):
        return "consumer"
    if prop.startswith(_PRODUCER_ONLY):
        return "producer"
    return "any"


class KafkaClients:
    """Settings and helpers of one `KafkaLogManager`: address, properties, timeout, and what the
    manager, its appenders and tailers share: the names of topics and groups (`topic_prefix` +
    name id) and the offsets (watermarks, committed offsets read through pooled consumers)."""

    def __init__(
        self,
        bootstrap_servers: str,
        config: Mapping[str, Any],
        timeout: float,
        topic_prefix: str = "streamcore-",
    ) -> None:
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive, got {timeout}")
        self.timeout = float(timeout)
        self.topic_prefix = topic_prefix
        self._seq = itertools.count(1)
        self._readers: OrderedDict[str, _Reader] = OrderedDict()  # group id -> offsets reader
        self._lock = threading.RLock()
        self._closed = False
        props = {str(k): v for k, v in (config or {}).items()}
        self.bootstrap = str(props.pop("bootstrap.servers", bootstrap_servers))
        timeout_ms = max(1, int(self.timeout * 1000))
        self.common: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "socket.connection.setup.timeout.ms": max(1000, min(timeout_ms, 30_000)),
            "socket.timeout.ms": min(max(timeout_ms, 10), 60_000),
            "logger": librdkafka_logger,
        }
        self.user = props
        self.identity = (self.bootstrap, str(props.get("sasl.username", "")))
        self.common.update({k: v for k, v in props.items() if _kind(k) == "any"})
        self._only = {
            kind: {k: v for k, v in props.items() if _kind(k) == kind}
            for kind in ("consumer", "producer")
        }

    # -- settings per client ----------------------------------------------------------------
    def producer_config(self) -> dict[str, Any]:
        conf = {
            "enable.idempotence": True,  # per-key order and no duplicates across retries
            "partitioner": "murmur2_random",  # the Java client's partitioner
            "message.timeout.ms": max(1, int(self.timeout * 1000)),
            "request.timeout.ms": min(max(1, int(self.timeout * 1000)), 30_000),
            "error_cb": _log_error("producer", self.identity),
        }
        conf.update(self.common)
        conf.update(self._only["producer"])
        return conf

    def consumer_config(self, group_id: str, client_id: str, static: bool = True) -> dict[str, Any]:
        """A consumer's settings. A synchronous commit waits up to `session.timeout.ms` for the
        group coordinator: a static tailer (not a group member, so the session means nothing
        else) gets min(session, timeout) to keep commits within the timeout."""
        conf = self._consumer_config(group_id, client_id)
        if static:
            session = min(int(conf["session.timeout.ms"]), max(100, int(self.timeout * 1000)))
            conf["session.timeout.ms"] = session
            conf["heartbeat.interval.ms"] = min(int(conf["heartbeat.interval.ms"]), session // 3)
        return conf

    def _consumer_config(self, group_id: str, client_id: str) -> dict[str, Any]:
        conf = {
            "group.id": group_id,
            "client.id": client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            # When its fetched queue passes queued.min.messages (100k records), librdkafka waits
            # this long before fetching again (1 s by default): a reader draining it in bulk (a
            # restore) stalled a second at a time and read 110k records/s; 10 ms, 260k-350k.
            # Only a consumer that is behind waits, and the wait costs a timer, no request.
            "fetch.queue.backoff.ms": 10,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 3_000,
            "error_cb": _log_error(client_id, self.identity),
        }
        conf.update(self.common)
        conf.update(self._only["consumer"])
        return conf

    def admin_config(self) -> dict[str, Any]:
        return {**self.common, "error_cb": _log_error("admin", self.identity)}

    # -- errors ---------------------------------------------------------------------------------
    def unavailable(self, what: str, detail: str) -> BrokerUnavailableError:
        failure = self._auth_failure()
        if failure is not None and "handshake failed" in failure:
            # The listener does not offer the mechanism (a PLAINTEXT listener offers none): the
            # credentials were never checked, so naming them would send the user the wrong way.
            return BrokerAuthenticationError(
                f"{what}: Kafka at {self.bootstrap} does not accept this client's security "
                f"settings ({failure}); make security.protocol and sasl.mechanism match the "
                "listener bootstrap.servers names (the scripted broker: PLAINTEXT on 9092, "
                "SASL_PLAINTEXT with PLAIN on 9094)"
            )
        if failure is not None:
            user = self.identity[1] or "(no sasl.username)"
            return BrokerAuthenticationError(
                f"{what}: Kafka at {self.bootstrap} refused to authenticate user {user} "
                f"({failure}); fix sasl.username / sasl.password (or security.protocol and "
                "sasl.mechanisms) in the kafka log config's properties, [log.configs.<name>."
                "properties] of include/streamcore.toml or of the file STREAMCORE_CONFIG names"
            )
        return BrokerUnavailableError(
            f"{what}: Kafka at {self.bootstrap} did not answer within {self.timeout:g} s "
            f"({detail}); check that the broker runs (`make kafka` starts the local one, "
            "`make kafka-status` tells) and the bootstrap.servers / security settings"
        )

    def _auth_failure(self) -> str | None:
        """The authentication failure librdkafka reported for these credentials, if any (taken:
        a later failure must be reported again to count)."""
        # Serve queued error callbacks; if that fails too, the caller reports what it has.
        with contextlib.suppress(KafkaException):
            _POOL.admin(self.admin_config()).poll(0)
        return _auth_failures.pop(self.identity, None)

    def translate(self, error: Any, what: str, topic: str | None = None) -> StreamcoreError:
        """A streamcore error for a KafkaError / KafkaException / timeout."""
        if isinstance(error, KafkaException):
            error = error.args[0] if error.args else error
        if isinstance(error, concurrent.futures.TimeoutError | TimeoutError):
            return self.unavailable(what, "timed out")
        if isinstance(error, KafkaError):
            code = error.code()
            if code in FENCED:
                return ProducerFencedError(
                    f"{what}: this producer was fenced ({error.str()}): another member opened "
                    "transactions with the same transactional id and took the task over, so this "
                    "one is a zombie whose writes and commits Kafka refuses. Stop working on the "
                    "task here; its uncommitted work is redone by the new owner"
                )
            if code in UNAVAILABLE or (code == KafkaError._NOENT and "leader" in error.str()):
                return self.unavailable(what, error.str())
            if code in (KafkaError._INVALID_ARG, KafkaError._INVALID_TYPE):
                return ConfigError(
                    f"{what}: invalid Kafka client setting: {error.str()}; check the librdkafka "
                    "properties given in `config` (the kafka config's properties table)"
                )
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
                return LogNotFoundError(
                    f"{what}: topic {topic or '?'} does not exist in Kafka at {self.bootstrap}; "
                    "create the log first"
                )
            return LogError(f"{what}: Kafka error {error.name()}: {error.str()}")
        return LogError(f"{what}: {error}")

    @contextmanager
    def errors(self, what: str, topic: str | None = None) -> Iterator[None]:
        try:
            yield
        except (KafkaException, concurrent.futures.TimeoutError, TimeoutError) as exc:
            raise self.translate(exc, what, topic) from exc

    def retry(self, what: str, call: Callable[[], T], topic: str | None = None) -> T:
        """`call()` again while it fails with a transient error, until the timeout."""
        deadline = time.monotonic() + self.timeout
        pause = 0.01
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not isinstance(error, KafkaError) or error.code() not in TRANSIENT:
                    raise self.translate(exc, what, topic) from exc
                code = error.code()
                if time.monotonic() + pause > deadline:
                    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise self.translate(exc, what, topic) from exc
                    # a coordinator or leader that stays away for the whole timeout
                    raise self.unavailable(what, error.str()) from exc
            except (concurrent.futures.TimeoutError, TimeoutError) as exc:
                raise self.translate(exc, what, topic) from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def result(
        self, what: str, future: concurrent.futures.Future[T], topic: str | None = None
    ) -> T:
        remaining = self.timeout
        with self.errors(what, topic):
            return future.result(timeout=remaining)

    # -- names ----------------------------------------------------------------------------------
    def topic(self, name: str | Name) -> str:
        """The topic of a log: prefix + name id."""
        return self.topic_prefix + Name.of(name).id

    def group_id(self, group: str | Name) -> str:
        """The Kafka consumer group id of a streamcore group: prefix + group id."""
        return self.topic_prefix + Name.of(group).id

    def client_id(self, group: str) -> str:
        """A new client id of a consumer of `group` (group id and a sequence number)."""
        return f"{self.group_id(group)}-{next(self._seq)}"

    def name_of(self, topic: str) -> Name | None:
        """The log (or group) name of a topic (or group id) of this prefix; None otherwise."""
        if not topic.startswith(self.topic_prefix):
            return None
        try:
            return Name.of_id(topic[len(self.topic_prefix) :])
        except InvalidNameError:
            return None

    # -- offsets --------------------------------------------------------------------------------
    def list_offsets(
        self, partitions: list[TopicPartition], spec: Any, committed: bool = True
    ) -> list[int]:
        """The offsets `spec` names (earliest, latest) of `partitions`, read committed (latest
        is the last stable offset: before the first record of a transaction still open) or,
        with `committed=False`, uncommitted (latest is the high watermark)."""
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        if not partitions:
            return []
        topic = partitions[0].topic

        def call() -> list[int]:
            futures = self.polled_admin().list_offsets(
                {TopicPartition(tp.topic, tp.partition): spec for tp in partitions},
                isolation_level=isolation,
                request_timeout=self.timeout,
            )
            by_key = {(k.topic, k.partition): f for k, f in futures.items()}
            return [
                by_key[(tp.topic, tp.partition)].result(timeout=self.timeout).offset
                for tp in partitions
            ]

        return self.retry(f"cannot list the offsets of {topic}", call, topic)

    def watermarks(self, partitions: list[TopicPartition]) -> list[tuple[int, int]]:
        """(low, high) per partition, asked of the broker in two requests."""
        lows = self.list_offsets(partitions, OffsetSpec.earliest())
        highs = self.list_offsets(partitions, OffsetSpec.latest())
        return list(zip(lows, highs, strict=True))

    def group_offsets(self, group_id: str, partitions: list[TopicPartition]) -> list[int | None]:
        """Committed offsets of `group_id`, read through a consumer handle of that group.

        Not `AdminClient.list_consumer_group_offsets`: when the group coordinator answers with a
        coordinator error (loading after a broker start or restart, moved), librdkafka 2.16
        re-queries the coordinator through the handle's consumer group, which an admin handle
        does not have, and the process dies of a segmentation fault in librdkafka's main thread
        (`rd_kafka_handle_OffsetFetch` -> `rd_kafka_cgrp_op(NULL)`). A consumer handle has the
        group and retries those errors itself. The consumer never subscribes, so it never joins
        the group."""
        topic = partitions[0].topic if partitions else None

        def call() -> list[int | None]:
            with self.offsets_reader(group_id) as reader:
                got = reader.committed(
                    [TopicPartition(tp.topic, tp.partition) for tp in partitions],
                    timeout=self.timeout,
                )
            by_key = {(tp.topic, tp.partition): tp for tp in got}
            out: list[int | None] = []
            for tp in partitions:
                found = by_key.get((tp.topic, tp.partition))
                if found is not None and found.error is not None:
                    raise KafkaException(found.error)
                out.append(found.offset if found is not None and found.offset >= 0 else None)
            return out

        return self.retry(f"cannot read the offsets of group {group_id}", call, topic)

    @contextlib.contextmanager
    def offsets_reader(self, group_id: str) -> Iterator[Any]:
        """A consumer of `group_id` used only to read its committed offsets. The `_READERS` most
        recently used stay open (a consumer costs a connection and a coordinator lookup); one
        pushed out, or left by `close()`, while another thread still reads through it is closed
        by that thread when it is done."""
        with self._lock:
            self.check_open()
            reader = self._readers.pop(group_id, None)
            if reader is None:
                with self.errors("cannot create a consumer"):
                    reader = _Reader(
                        Consumer(self.consumer_config(group_id, f"{group_id}-offsets"))
                    )
            self._readers[group_id] = reader  # most recently used last
            while len(self._readers) > _READERS:
                self._readers.popitem(last=False)[1].retire()
            reader.users += 1
        try:
            yield reader.consumer
        finally:
            with self._lock:
                reader.users -= 1
                if reader.retired:
                    reader.retire()

    def check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the Kafka log manager of {self.bootstrap} is closed")

    def close(self) -> None:
        """Retire the offsets readers (each closes once no call uses it); calls that need one
        then raise `LogClosedError`."""
        with self._lock:
            for reader in self._readers.values():
                reader.retire()
            self._readers.clear()
            self._closed = True

    # -- pooled clients -------------------------------------------------------------------------
    def producer(self) -> Producer:
        with self.errors("cannot create a Kafka producer"):
            return _POOL.producer(self.producer_config())

    def admin(self) -> AdminClient:
        with self.errors("cannot create a Kafka admin client"):
            return _POOL.admin(self.admin_config())

    def polled_admin(self) -> AdminClient:
        """The pooled admin client, its queued librdkafka log lines served first."""
        admin = self.admin()
        admin.poll(0)
        return admin


class _Reader:
    """An offsets-reading consumer and how many calls use it; guarded by the manager's lock."""

    __slots__ = ("closed", "consumer", "retired", "users")

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.users = 0
        self.retired = False
        self.closed = False

    def retire(self) -> None:
        """Close now if no call uses it, else when the last one is done."""
        self.retired = True
        if self.users == 0 and not self.closed:
            self.closed = True
            self.consumer.close()


def _log_error(who: str, identity: tuple[str, str]) -> Callable[[KafkaError], None]:
    def on_error(error: KafkaError) -> None:
        if error.code() in AUTHENTICATION:
            _auth_failures[identity] = error.str()
        # librdkafka logs transient errors itself and retries; operations that need the broker
        # raise on their timeout. Only fatal errors (the client is unusable) are worth a line.
        if error.fatal():
            logger.error("%s: fatal Kafka error: %s", who, error.str())

    return on_error


def _key(conf: Mapping[str, Any]) -> tuple[Any, ...]:
    return (os.getpid(), *sorted((k, repr(v)) for k, v in conf.items() if k != "error_cb"))


class _Pool:
    """One producer and one admin client per distinct configuration and process, shared by every
    manager that uses it (Kafka's advice: a producer per process). An idempotent producer needs
    about half a second to get its producer id; sharing pays that once. Never shared across a
    fork: the key holds the pid."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._producers: dict[tuple[Any, ...], Producer] = {}
        self._admins: dict[tuple[Any, ...], AdminClient] = {}

    def producer(self, conf: dict[str, Any]) -> Producer:
        key = _key(conf)
        with self._lock:
            found = self._producers.get(key)
            if found is None:
                found = self._producers[key] = Producer(conf)
            return found

    def discard_producer(self, producer: Producer) -> None:
        """Forget a producer in a fatal state so the next appender gets a new one."""
        with self._lock:
            for key, value in list(self._producers.items()):
                if value is producer:
                    del self._producers[key]

    def admin(self, conf: dict[str, Any]) -> AdminClient:
        key = _key(conf)
        with self._lock:
            found = self._admins.get(key)
            if found is None:
                found = self._admins[key] = AdminClient(conf)
            return found

    def flush_all(self) -> None:
        """At exit: deliver what is queued and drop every client, librdkafka's log lines muted
        (reconnect attempts to a broker long gone...); undelivered records are counted."""
        pid = os.getpid()
        librdkafka_logger.disabled = True
        for key, producer in list(self._producers.items()):
            if key[0] == pid and len(producer):  # records still queued
                try:
                    left = producer.flush(5)
                except Exception:  # pragma: no cover - shutdown path
                    continue
                if left:
                    logger.warning("%d Kafka records were not delivered at exit", left)
        with self._lock:
            self._producers.clear()
            self._admins.clear()


_POOL = _Pool()
atexit.register(_POOL.flush_all)

"""`PubSub`: Nuxeo Stream's PubSub on a log. A message published to a topic reaches **every**
process subscribed to it, not one member of a group: cluster-wide cache invalidation,
configuration reloads, "stop what you are doing" signals (docs/pubsub.md).

- **One log per topic**, `<namespace>/<topic>` (namespace `pubsub` by default), of one partition
  so that every subscriber sees one order. It is created on first use with a retention (default
  one hour): a topic carries short-lived signals, not data to replay.
- **Each subscriber reads with a tailer of its own** (a static assignment under a group nobody
  else uses, never committed), from the log's end at the time it subscribes. So it receives every
  message published after `subscribe` returned, in publication order, and none from before; a
  process that restarts subscribes again from the end. Messages are delivered to `callback(topic,
  message)` on one thread per subscription, in order; a callback that raises is logged and the
  next message delivered (a subscriber that fails on one message must not go deaf).
- **Publishing** from any process: on the local log, whose partitions are written by one
  process at a time, a publish takes the topic's partition for its one append and releases it
  (waiting up to `publish_timeout` while another process publishes).
- **Delivery** is what the log gives: every message once to each live subscriber (a subscriber
  that falls further behind than the retention, on a log whose retention purges, misses what
  was purged; the local log purges whole segments only). Messages are bytes; encode on top.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from streamcore.errors import InvalidArgumentError, InvalidNameError
from streamcore.log import LogAppender, LogManager
from streamcore.log.shared_append import append_shared
from streamcore.names import Name

__all__ = ["DEFAULT_RETENTION", "PubSub", "Subscription"]

logger = logging.getLogger(__name__)

DEFAULT_RETENTION = "1h"
_POLL = 0.2  # s a subscriber's read waits for a message before checking whether it was closed


class Subscription:
    """One subscriber of one topic: its thread delivers the messages until `close()`."""

    def __init__(
        self,
        manager: LogManager,
        topic: str,
        name: Name,
        callback: Callable[[str, bytes], None],
    ) -> None:
        self.topic = topic
        self.received = 0  # messages delivered to the callback (failed ones included)
        self._callback = callback
        self._stop = threading.Event()
        group = f"{name.namespace}/subscriber_{os.getpid()}_{os.urandom(6).hex()}"
        self._tailer = manager.tailer(group, name)
        self._tailer.to_end()  # from here on: nothing published before subscribe() returned
        self._thread = threading.Thread(
            target=self._run, name=f"streamcore-pubsub-{topic}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        tailer = self._tailer
        try:
            while not self._stop.is_set():
                record = tailer.read(timeout=_POLL)
                if record is None:
                    continue
                try:
                    self._callback(self.topic, record.message)
                except Exception:
                    logger.exception(
                        "pubsub subscriber of %r failed on the message at offset %d; going on",
                        self.topic,
                        record.offset,
                    )
                self.received += 1
        finally:
            tailer.close()

    def close(self, timeout: float = 10.0) -> None:
        """Stop delivering (the message being delivered finishes first)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PubSub:
    """Publish to topics and subscribe to them over `manager`'s logs (see the module doc)."""

    def __init__(
        self,
        manager: LogManager,
        *,
        namespace: str = "pubsub",
        retention: str = DEFAULT_RETENTION,
        publish_timeout: float = 10.0,
    ) -> None:
        self.manager = manager
        self.publish_timeout = publish_timeout
        self.namespace = namespace
        self.retention = retention
        self._appenders: dict[Name, LogAppender[bytes]] = {}
        self._subscriptions: list[Subscription] = []
        self._lock = threading.Lock()

    def _name(self, topic: str) -> Name:
        try:
            return Name.of(f"{self.namespace}/{topic}")
        except InvalidNameError as exc:
            raise InvalidNameError(
                f"invalid pubsub topic {topic!r}: a topic is a log name without namespace, "
                f"[A-Za-z0-9][A-Za-z0-9_-]* ({exc})"
            ) from None

    def log_name(self, topic: str) -> Name:
        """The log of `topic`, created when missing."""
        name = self._name(topic)
        if not self.manager.exists(name):
            self.manager.create(name, 1, retention=self.retention)
        elif self.manager.size(name) != 1:
            raise InvalidArgumentError(
                f"the log {name} of pubsub topic {topic!r} has {self.manager.size(name)} "
                "partitions; a topic needs one (one order for every subscriber): delete it or "
                "use another topic"
            )
        return name

    def publish(self, topic: str, message: bytes) -> None:
        """Append `message` to `topic`; every current subscriber receives it."""
        if not isinstance(message, bytes | bytearray | memoryview):
            raise InvalidArgumentError(
                f"a pubsub message is bytes, got {type(message).__name__}; encode it first"
            )
        with self._lock:
            name = self._name(topic)
            appender = self._appenders.get(name)
            if appender is None or appender.closed:  # checked and created once per topic
                name = self.log_name(topic)
                appender = self._appenders[name] = self.manager.appender(name)
        append_shared(self.manager, appender, name, topic, bytes(message), self.publish_timeout)

    def subscribe(self, topic: str, callback: Callable[[str, bytes], None]) -> Subscription:
        """Deliver every message published to `topic` from now on to `callback(topic,
        message)`, in order, on a thread of the subscription's own."""
        subscription = Subscription(self.manager, topic, self.log_name(topic), callback)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def close(self) -> None:
        """Stop every subscription and close the appenders (not the manager)."""
        with self._lock:
            subscriptions, self._subscriptions = self._subscriptions, []
            appenders = list(self._appenders.values())
            self._appenders.clear()
        for subscription in subscriptions:
            subscription.close()
        for appender in appenders:
            appender.close()

    def __enter__(self) -> PubSub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

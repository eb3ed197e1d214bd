"""The Kafka backend: `KafkaLogManager` behind the same log API as the local and memory logs
(confluent-kafka / librdkafka).

Mapping
- A log is a topic named `topic_prefix + Name.id` (`streamcore-bulk-command` for `bulk/command`);
  a partition is a topic partition; an offset is a Kafka offset. Appenders use the shared
  idempotent producer: its offsets are contiguous. `transactions(id)` (`transaction.py`) writes in
  Kafka transactions: each commit or abort leaves a marker (a control record holding an offset
  no reader returns), and read_committed readers (the default `isolation.level`) skip aborted
  records, so offsets have gaps. A tailer's position is then the consumer's (past markers), its
  end the last stable offset, and `lost` counts only offsets below the log start.
- A consumer group `g` is the Kafka group `topic_prefix + Name.of(g).id`; `list_logs` and
  `list_groups` only see topics and groups of the manager's prefix.
- `tailer(group, source)` is a consumer with a static `assign`; `subscribe(group, names,
  listener)` is a member of the Kafka consumer group (classic protocol, eager assignment unless
  `partition.assignment.strategy` / `group.protocol` say otherwise; a member of several topics
  always gets the `range` assignor, so that partition p of every topic goes to the same member,
  the local log's tasks); librdkafka's on_assign /
  on_revoke / on_lost call the `RebalanceListener` inside `read()`. On revoke: listener, then the
  marked positions of the revoked partitions are committed; on loss (session expired): listener,
  marks dropped without commit.
- Commit = synchronous commit of the next offset to read. Mark mode (`mark`, periodic commit every
  `commit_interval`) runs from every `read` (busy or idle), on revoke and on `close`.
- `lag` / `lag_per_partition`: committed offsets against the low/high watermarks; `lost` = records
  the group skipped because retention deleted them (committed < low watermark). A tailer counts
  them in `tailer.lost`.
- Any librdkafka property (SASL, SSL, `client.id`, `linger.ms`, `session.timeout.ms`, ...) goes
  in `config`; each client gets the general ones plus those of its kind (producer or consumer).
  `timeout` bounds every broker call: an unreachable broker raises `BrokerUnavailableError` (a
  `LogError`) naming the address and what to check, never a hang. An unknown property is a
  `ConfigError`.
- One idempotent producer per process and configuration, shared by every manager and appender
  (getting a producer id costs about half a second, paid once).

Differences from the local log (documented, and asserted in the tests)
1. Keyed partitioning: Kafka's own partitioner (`murmur2_random`, the Java client's:
   `toPositive(murmur2(utf8(key))) % partitions`), not Nuxeo's Java `hashCode` one; the same key
   can land in another partition number than in a local log. `kafka_partition_for_key` and
   `KafkaAppender.partition_for` predict it.
2. Order across partitions: a tailer of several partitions returns records in fetch order, not
   one partition batch after the other; after `seek`, the next record *of that partition* is the
   target, but records of other partitions may come first. Order within a partition is kept.
3. `read(0)` and iteration return what is in the log at the call, like the local log; when the
   fetched queue is empty this costs one ListOffsets request, and a record the broker holds but
   librdkafka has not fetched yet is waited for (up to `timeout`), so `read(t)` may take a little
   longer than `t` when records are waiting.
4. `append_batch` is all or nothing as far as Kafka allows: keys and values are checked and
   encoded before the first record is produced (a bad item writes nothing), but if the broker
   rejects or times out part of a batch the acknowledged records stay, and the error says how many
   landed. A transaction's appender (`KafkaTransactions.appender`) makes a checkpoint atomic, with
   gaps in the offsets; the local and memory logs have no transactions.
5. Retention is the broker's (`log.retention.*`, 7 days on `make kafka`'s broker; `create(...,
   retention="2d")` sets the topic's `retention.ms`); there is no `purge()`.
6. `list_groups` lists groups that committed on the log; a group that reads by static assignment
   appears once it committed (the local log: likewise, from its position files).
7. `delete` waits until the broker forgot the topic and the offsets groups committed on it; like
   the local log it refuses while this manager has an appender or tailer open on the log.
8. `info().size_bytes` is 0 (not known to a client); `commit_position` (CLI `position`) needs a
   group without live subscribed members (Kafka's rule for admin offset changes).
9. Don't mix `tailer()` and `subscribe()` for one group: while subscribed members are alive,
   Kafka rejects the commits of a static consumer of that group.
10. A synchronous commit waits for the group coordinator at most `session.timeout.ms` (a static
    tailer uses min(session timeout, `timeout`)).
11. Subscribed groups rebalance on heartbeats (`heartbeat.interval.ms`, default 3 s here; a
    member's partitions move after `session.timeout.ms`, default 10 s, when it dies), with the
    eager protocol revoking all partitions of every member at each change. A subscription to
    several topics uses the `range` assignor (co-partitioned tasks), which is eager and not
    sticky: a rebalance may move a task that the local log's protocol would leave in place.
12. `read_arrow` copies fetched messages into the batch (the local log maps its segments), and a
    batch may hold several partitions (the `partition` column tells). `read_columns` returns the
    same records as Python lists (`RawColumns`), for a reader that wants Python objects anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    # What __getattr__ hands out, for type checkers ("X as X": `__all__` is computed).
    from streamcore.log.kafka.appender import KafkaAppender as KafkaAppender
    from streamcore.log.kafka.manager import KafkaLogManager as KafkaLogManager
    from streamcore.log.kafka.partitioner import kafka_partition_for_key as kafka_partition_for_key
    from streamcore.log.kafka.partitioner import murmur2 as murmur2
    from streamcore.log.kafka.tailer import KafkaTailer as KafkaTailer
    from streamcore.log.kafka.transaction import KafkaTransactions as KafkaTransactions

# Exports are imported on first use (PEP 562): the registry imports `streamcore.log.kafka.backend`
# to load a configuration naming Kafka, which must not need confluent-kafka.
_EXPORTS = {
    "KafkaAppender": "appender",
    "KafkaLogManager": "manager",
    "KafkaTailer": "tailer",
    "KafkaTransactions": "transaction",
    "kafka_partition_for_key": "partitioner",
    "murmur2": "partitioner",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

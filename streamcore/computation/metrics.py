"""Prometheus metrics of a stream processor, in a registry of its own (never the global one).

Counters, per computation (units summed):
`streamcore_computation_processed_total`, `..._failed_total` (retries exhausted),
`..._retried_total` (retry attempts), `..._skipped_total`, `..._dead_lettered_total`,
`..._late_total` (records a windowed aggregation sent to its late stream), `..._timers_total`,
`..._produced_total` (appended at checkpoints), `..._checkpoints_total`,
`..._checkpoint_failures_total`.
Histogram `streamcore_computation_record_processing_seconds`: time per record, measured per read
batch (each batch adds its records at the batch's mean time: timing every record would cost more
than a small computation does).
Gauges: `streamcore_computation_terminated` (1 once a unit failed), `..._running_units`,
`..._low_watermark_ms`, and per computation and input stream `..._lag` (records),
`..._latency_seconds`, `..._end_offset`, `..._position`. Per computation, state store and task,
of its last restore (docs/state.md, "Restore"): `..._restore_remaining` (changelog offsets left,
0 once done), `..._restore_rate` (records/s), `..._restore_records` (applied and void records
read), `..._restoring` (1 while it runs); of each standby copy a unit keeps (docs/state.md,
"Standby replicas"): `..._standby_lag` (changelog offsets its last pass had left) and
`..._standby_warm` (1 once caught up).

Units only bump plain integers; everything is read when the registry is collected (a scrape).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from streamcore.computation.stats import BUCKETS, RUNNING, TERMINATED, UnitStats

if TYPE_CHECKING:
    from streamcore.computation.stream_processor import StreamProcessor

__all__ = ["ProcessorCollector", "processor_registry"]

logger = logging.getLogger(__name__)

P = "streamcore_computation_"
COUNTERS = (
    ("processed", "records handed to the computation"),
    ("failed", "records or timers whose retries were exhausted"),
    ("retried", "retry attempts"),
    ("skipped", "failed records skipped by the policy"),
    ("dead_lettered", "failed records appended to the dead-letter stream"),
    ("late", "records a windowed aggregation sent to its late stream (after the grace period)"),
    ("timers", "timers fired"),
    ("produced", "records appended to output and dead-letter streams at checkpoints"),
    ("checkpoints", "checkpoints taken"),
    ("checkpoint_failures", "failed checkpoint attempts"),
)


class ProcessorCollector(Collector):
    """Reads a processor's unit counters and its groups' lag at collection time."""

    def __init__(self, processor: StreamProcessor) -> None:
        self.processor = processor

    def collect(self) -> Iterator[Metric]:
        by_name: dict[str, list[UnitStats]] = {}
        for stats in self.processor.unit_stats():
            by_name.setdefault(stats.computation, []).append(stats)
        for field, doc in COUNTERS:
            family = CounterMetricFamily(P + field, f"Computation {doc}", labels=["computation"])
            for name, units in by_name.items():
                family.add_metric([name], sum(getattr(u, field) for u in units))
            yield family
        yield self._histogram(by_name)
        terminated = GaugeMetricFamily(
            P + "terminated",
            "1 when a unit of the computation was terminated by a failure",
            labels=["computation"],
        )
        running = GaugeMetricFamily(
            P + "running_units", "concurrency units running", labels=["computation"]
        )
        low = GaugeMetricFamily(
            P + "low_watermark_ms",
            "timestamp (ms) of the low watermark: every older record was processed",
            labels=["computation"],
        )
        for name, units in by_name.items():
            terminated.add_metric([name], int(any(u.state == TERMINATED for u in units)))
            running.add_metric([name], sum(u.state == RUNNING for u in units))
            low.add_metric([name], self.processor.low_watermark(name) >> 17)
        yield terminated
        yield running
        yield low
        yield from lag_families(self.processor)
        yield from self._restores()

    def _restores(self) -> Iterator[Metric]:
        labels = ["computation", "store", "task"]
        families = {
            "remaining": GaugeMetricFamily(
                P + "restore_remaining", "changelog offsets the restore has left", labels=labels
            ),
            "rate": GaugeMetricFamily(
                P + "restore_rate", "records per second the restore reads", labels=labels
            ),
            "records": GaugeMetricFamily(
                P + "restore_records", "changelog records the restore has read", labels=labels
            ),
            "restoring": GaugeMetricFamily(
                P + "restoring", "1 while the store is being restored", labels=labels
            ),
        }
        for name, task, progress in self.processor.restores():
            key = [name, progress.store, str(task)]
            families["remaining"].add_metric(key, progress.remaining)
            families["rate"].add_metric(key, progress.rate)
            families["records"].add_metric(key, progress.restored + progress.skipped)
            families["restoring"].add_metric(key, int(not progress.done))
        yield from families.values()
        lag = GaugeMetricFamily(
            P + "standby_lag", "changelog offsets the standby copy had left", labels=labels
        )
        warm = GaugeMetricFamily(
            P + "standby_warm", "1 once the standby copy is caught up", labels=labels
        )
        for name, task, progress, is_warm in self.processor.standbys():
            key = [name, progress.store, str(task)]
            lag.add_metric(key, progress.remaining)
            warm.add_metric(key, int(is_warm))
        yield lag
        yield warm

    @staticmethod
    def _histogram(by_name: dict[str, list[UnitStats]]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            P + "record_processing_seconds",
            "processing time per record (mean of each read batch)",
            labels=["computation"],
        )
        for name, units in by_name.items():
            counts = [sum(u.bucket_counts[i] for u in units) for i in range(len(BUCKETS) + 1)]
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([name], buckets, sum(u.time_sum for u in units))
        return family


def lag_families(source: Any) -> Iterator[Metric]:
    """Lag, latency, end and position gauges per computation and input stream, from
    `source.stream_lags()` (a StreamProcessor, or anything listing lags the same way)."""
    gauges = {
        "lag": GaugeMetricFamily(
            P + "lag", "records not yet committed", labels=["computation", "stream"]
        ),
        "latency": GaugeMetricFamily(
            P + "latency_seconds",
            "age of the last committed record while there is lag (0 when caught up)",
            labels=["computation", "stream"],
        ),
        "end": GaugeMetricFamily(
            P + "end_offset", "records appended to the stream", labels=["computation", "stream"]
        ),
        "pos": GaugeMetricFamily(
            P + "position", "committed position of the group", labels=["computation", "stream"]
        ),
    }
    try:
        rows = source.stream_lags()
    except Exception:
        logger.exception("could not measure the lag of the computations")
        rows = []
    for name, stream, lag, latency in rows:
        gauges["lag"].add_metric([name, stream], lag.lag)
        gauges["latency"].add_metric([name, stream], latency.latency_ms / 1000.0)
        gauges["end"].add_metric([name, stream], lag.end)
        gauges["pos"].add_metric([name, stream], lag.pos)
    yield from gauges.values()


def processor_registry(processor: StreamProcessor) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessorCollector(processor))
    return registry

"""The one-computation topology that backfill tests replay into: each record copied from the
input stream to the output stream, with a checkpoint per record (so a drain ends)."""

from __future__ import annotations

from streamcore.computation import Computation, Topology


class ReplayCopy(Computation):
    def __init__(self) -> None:
        super().__init__("replay_copy", 1, 1)

    def process_record(self, context, input_stream, record) -> None:
        context.produce_record("o1", record)
        context.ask_for_checkpoint()


def copy_topology(source: str, target: str) -> Topology:
    """`source` copied to `target` by `ReplayCopy`."""
    return Topology.builder().add_computation(ReplayCopy, [f"i1:{source}", f"o1:{target}"]).build()

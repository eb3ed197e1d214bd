"""Errors of the computations: the DSL, the processor API and the runtime. Each message names
the stream, operator or computation at fault and says how to fix it."""

from __future__ import annotations

from streamcore.errors import ComputationError, StreamcoreError, TopologyError

__all__ = [
    "DslDefinitionError",
    "InvalidTimestampError",
    "NotCallableError",
    "NotDeadLetterError",
    "NotProcessingError",
    "UnfinishedStreamError",
    "UnknownOutputError",
]


class DslDefinitionError(TopologyError, ValueError):
    """Raised while defining or building a DSL topology or adding a processor, before anything
    runs: a bad argument (codec, name, branch without predicates, ...). Fix the definition;
    retrying cannot help."""


class NotCallableError(DslDefinitionError, TypeError):
    """Raised when an operator (`filter`, `map`, `branch`, ...) is given something that is not a
    function."""


class UnfinishedStreamError(DslDefinitionError):
    """Raised by `build()` when a chain does not end in `.to()` or `.through()`: its records
    would be computed and thrown away, which is almost always a forgotten sink."""


class UnknownOutputError(StreamcoreError, LookupError):
    """Raised at run time when a processor sends to a stream or child it did not declare as an
    output. Declare it in `outputs=` when adding the processor; retrying cannot help."""

    retryable = False


class NotProcessingError(ComputationError, RuntimeError):
    """A DSL sink was called while its computation processes no record (outside
    `process_record`): sinks run only inside the chain the DSL compiled."""


class NotDeadLetterError(StreamcoreError):
    """`DeadLetter.of` was given a record that is not a streamcore dead-letter record (no or
    another dead-letter format, a missing field). Read dead-letter streams only with it."""

    retryable = False


class InvalidTimestampError(ComputationError, ValueError):
    """A record's timestamp extractor found no usable timestamp (a missing or non-int field, a
    negative value): the record goes through the computation's failure policy. Fix the record or
    the extractor (`Settings.set_timestamp_extractor`); retrying cannot help."""

    retryable = False

"""The errors a binary reports as one line on stderr (exit 2), not a traceback.

Standard library only, so every binary (plotting ones too) can catch them
without importing TensorFlow.
"""


class CorruptCheckpointError(RuntimeError):
  """The latest checkpoint cannot be read: refuse rather than restart from 0."""


class WorkerUnavailableError(RuntimeError):
  """A remote TFF worker stopped answering during a computation."""


class RoundCheckError(ValueError):
  """A check inside a TFF computation failed (e.g. more clients than
  max_clients_per_round, or none); the message is the check's own."""


# Bad flags or arguments, missing or unreadable files, and the errors above.
USER_ERRORS = (ValueError, TypeError, OSError, CorruptCheckpointError,
               WorkerUnavailableError)

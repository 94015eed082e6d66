"""The project's errors: one base class, small named leaves.

    >>> raise UnknownFamily("no family 'foo'; known: inventory_dp")
    Traceback (most recent call last):
    vhd.schemas.errors.UnknownFamily: no family 'foo'; known: inventory_dp
    >>> issubclass(UnknownFamily, VhdError)       # one `except VhdError` catches every leaf
    True
"""


class VhdError(Exception):
    """Base class of every error this project raises on purpose."""


class UnknownFamily(VhdError):
    """A family name that is not in the registry."""


class InvalidParams(VhdError):
    """Knobs or θ that do not satisfy a family's Params."""


class SolverError(VhdError):
    """A solver that did not reach a certified optimum."""


class SetterError(VhdError):
    """A setter that could not produce a module."""


class SandboxError(VhdError):
    """The sandbox itself failed (not the module under test)."""


class WarehouseError(VhdError):
    """A warehouse that cannot be opened, migrated or written."""


class WarehouseMissing(WarehouseError):
    """A warehouse file that does not exist where a reader expected it."""


class WarehouseBusy(WarehouseError):
    """A warehouse already opened for writing by another process."""


class IntegrityError(WarehouseError):
    """A row that no longer matches its id or digests: met again by an insert, or found by the audit."""


class UnknownEnvironment(VhdError):
    """An environment id that the warehouse does not hold."""


class TrajectoryFormatError(VhdError):
    """A trajectory file that is not JSONL of [{"tool", "arguments"}] lists."""


class UnknownCorpusVersion(VhdError):
    """A corpus version that has not been published."""


class PassageFormatError(VhdError):
    """A passage file that cannot be read at all (not JSONL or Parquet, missing, corrupt)."""


class SetterUnavailable(SetterError):
    """The LLM API could not be reached or kept failing (after its retries): nothing is stored."""


class PrefectUnavailable(VhdError):
    """Prefect's API could not be reached: its temporary server did not start in time."""

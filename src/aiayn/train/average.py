"""Checkpoint averaging now lives in `aiayn.averaging` (below decode, which averages too); this keeps
the old import path working."""

from aiayn.averaging import average_checkpoints, average_last, average_run, last_checkpoints

__all__ = ["average_checkpoints", "average_last", "average_run", "last_checkpoints"]

"""The one exception type for bad data input; its message is a single line meant for users."""

from __future__ import annotations

from aiayn.errors import AiaynError


class DataError(AiaynError, ValueError):
    """Bad or missing input data (line-count mismatch, invalid UTF-8, missing file, checksum ...)."""

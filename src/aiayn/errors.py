"""User-facing errors: the CLI prints their message as one line and exits with status 2."""

from __future__ import annotations


class AiaynError(Exception):
    """Bad input, a missing or damaged file, an impossible setting: something the user can fix."""

"""User-facing errors: the CLI prints their message as one line and exits with status 2."""

from __future__ import annotations


class AiaynError(Exception):
    """Bad input, a missing or damaged file, an impossible setting: something the user can fix."""


class ConfigError(AiaynError, ValueError):
    """A config file, field or override that cannot be used (the CLI prints it as one line). Here, below
    both aiayn.config and aiayn.recipes, which raise it (config finds recipes by name)."""

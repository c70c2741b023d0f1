"""Exceptions, marked terminal (fix something, then rerun) or transient (retrying may succeed)."""

from __future__ import annotations


class IcetideError(Exception):
    """Base class. ``terminal`` tells a runner whether retrying can help."""

    terminal: bool = True


class ConfigError(IcetideError):
    """The configuration is invalid; the message names the key to change."""


class ServiceUnreachableError(IcetideError):
    """A service named in the configuration (Kafka, a catalog) cannot be reached."""


class SetupError(IcetideError):
    """A required local dependency (jars, Java, the Kafka distribution) is missing."""


class IdentifierError(IcetideError):
    """A table, namespace or column name is not allowed (see ``icetide.identifiers``)."""


class CheckpointMismatchError(IcetideError):
    """The streaming checkpoint and the offsets recorded in the tables disagree."""


class TransientError(IcetideError):
    """A failure that may succeed when retried (commit conflicts, broker hiccups)."""

    terminal = False

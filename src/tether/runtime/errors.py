"""Errors raised by the plugin runtime.

Every error names the plugin, row or service it is about, so a message read in a
log points at the place to fix.
"""

from __future__ import annotations


class RuntimeFault(Exception):
    """Base class of every error the plugin runtime raises."""


class FiberInactiveError(RuntimeFault):
    """A registration was attempted on a fiber that is unloading, disposed or failed."""


class PluginDefinitionError(RuntimeFault):
    """An object given as a plugin does not have the shape of one."""


class PluginConfigError(RuntimeFault):
    """A plugin's configuration did not validate against its ``Config`` schema."""


class PluginStartError(RuntimeFault):
    """A plugin's ``apply`` raised; everything it had registered was rolled back."""


class ServiceError(RuntimeFault):
    """A service was read that the caller did not inject, or that is not provided."""


class ServiceConflictError(ServiceError):
    """A service name is already provided by another live fiber."""


class CompositionError(RuntimeFault):
    """A composition file or row is invalid."""


class ReloadError(RuntimeFault):
    """A reload failed; the previous code was restored and keeps running."""


class Veto(RuntimeFault):
    """Raised by a waterfall listener to reject the value; carries the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

"""The plugin runtime: contexts, fibers, effects, services, events, composition, reload."""

from tether.runtime.app import Runtime
from tether.runtime.context import CallerBound, Context
from tether.runtime.effects import Disposer, Effect
from tether.runtime.errors import (
    CompositionError,
    FiberInactiveError,
    PluginConfigError,
    PluginDefinitionError,
    PluginStartError,
    ReloadError,
    RuntimeFault,
    ServiceConflictError,
    ServiceError,
    Veto,
)
from tether.runtime.events import EventBus
from tether.runtime.fiber import Fiber, FiberState
from tether.runtime.keys import (
    EventKey,
    Gather,
    Next,
    Notice,
    Parallel,
    Serial,
    ServiceKey,
    Waterfall,
)
from tether.runtime.plugin import PluginSpec, plugin_spec
from tether.runtime.signal import Cancelled, CancelSignal

__all__ = [
    "CallerBound",
    "CancelSignal",
    "Cancelled",
    "CompositionError",
    "Context",
    "Disposer",
    "Effect",
    "EventBus",
    "EventKey",
    "Fiber",
    "FiberInactiveError",
    "FiberState",
    "Gather",
    "Next",
    "Notice",
    "Parallel",
    "PluginConfigError",
    "PluginDefinitionError",
    "PluginSpec",
    "PluginStartError",
    "ReloadError",
    "Runtime",
    "RuntimeFault",
    "Serial",
    "ServiceConflictError",
    "ServiceError",
    "ServiceKey",
    "Veto",
    "Waterfall",
    "plugin_spec",
]

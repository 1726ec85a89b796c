"""What a plugin is: a module, a class, or an object with ``apply``.

A plugin carries metadata:

* ``name`` — defaults to the module's last component or the class name;
* ``inject`` — the service names it needs; the fiber stays pending until all
  are provided, and unloads when one goes away;
* ``optional`` — service names it reads with ``ctx.get`` when they exist: the
  fiber does not load while another fiber that declares one (``provides``)
  has yet to settle, so what it does as it loads sees the service when it
  comes; it loads without it once no such fiber is pending or loading (the
  provider failed, or is not composed). It does not unload when one goes away;
* ``provides`` — the service names it will provide as it loads: a promise to
  the fibers that wait for them as ``optional`` (providing an undeclared name
  is allowed; nobody waits for it);
* ``Config`` — a :class:`~tether.runtime.schema.Schema` or a pydantic model;
  the config given at mount is decoded into it, and its defaults fill what
  was omitted. pydantic is imported only when a plugin with a pydantic
  ``Config`` mounts.

Forms:

* a **module** with ``apply(ctx, config)`` (sync or async) and optional
  module-level ``name``, ``inject``, ``Config``;
* an **object** with an ``apply`` attribute and the same optional attributes;
* a **function** ``apply(ctx, config)`` (its attributes may carry the metadata);
* a **class**, instantiated as ``cls(ctx, config)``; if the instance has an
  async ``start()`` method it is awaited after construction.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from tether.runtime.errors import PluginConfigError, PluginDefinitionError
from tether.runtime.keys import ServiceKey, service_name
from tether.runtime.schema import SchemaError, check_model, decode

if TYPE_CHECKING:
    from tether.runtime.context import Context

Apply = Callable[["Context", Any], Awaitable[None]]


class PluginSpec(msgspec.Struct, frozen=True):
    """A plugin normalized to one shape; built by :func:`plugin_spec`."""

    target: object
    name: str
    inject: tuple[str, ...]
    optional: tuple[str, ...]
    """Services it waits for while a fiber that ``provides`` them has yet to settle."""
    provides: tuple[str, ...]
    """Services it declares it provides once loaded."""
    config_model: type | None
    """A :class:`~tether.runtime.schema.Schema` or a pydantic model class."""
    apply: Apply
    module: str | None
    """The module the plugin's code lives in: what a reload re-imports."""
    attr: str | None
    """The attribute of ``module`` holding the plugin, ``None`` for a module plugin."""

    def validate_config(self, raw: object) -> object:
        """Validate ``raw`` (a mapping, a ``Config`` instance or ``None``) against ``Config``.

        Returns the ``Config`` instance, or ``None`` for a plugin without one.
        An instance is checked too, as if it had been given as data.

        Raises:
            PluginConfigError: the message names the plugin and the bad field.
        """
        model = self.config_model
        if model is None:
            if raw is None or raw == {}:
                return None
            raise PluginConfigError(f"plugin {self.name!r} takes no config, got {raw!r}")
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping | model):
            raise PluginConfigError(
                f"plugin {self.name!r}: config must be a mapping, got {type(raw).__name__}"
            )
        try:
            return decode(model, raw)
        except SchemaError as exc:
            raise PluginConfigError(f"plugin {self.name!r}: invalid config: {exc}") from None


def plugin_spec(plugin: object) -> PluginSpec:
    """Normalize ``plugin`` to a :class:`PluginSpec`.

    Raises:
        PluginDefinitionError: ``plugin`` is none of the accepted forms, or its
            metadata has the wrong type.
    """
    if isinstance(plugin, PluginSpec):
        return plugin
    module: str | None
    if isinstance(plugin, ModuleType):
        module = plugin.__name__
        attr = None
        default_name = module.rsplit(".", 1)[-1]
    else:
        module_attr = getattr(plugin, "__module__", None)
        module = module_attr if isinstance(module_attr, str) else None
        if isinstance(plugin, type) or inspect.isfunction(plugin):
            attr = _find_attr(module, plugin)
            default_name = plugin.__name__
        else:
            attr = _find_attr(module, plugin)
            default_name = type(plugin).__name__
    name = getattr(plugin, "name", default_name)
    if not isinstance(name, str) or not name:
        raise PluginDefinitionError(f"plugin {plugin!r}: 'name' must be a non-empty string")
    inject = _names_of(plugin, name, "inject")
    optional = _names_of(plugin, name, "optional")
    provides = _names_of(plugin, name, "provides")
    config_model = getattr(plugin, "Config", None)
    if config_model is not None:
        try:
            check_model(config_model)
        except TypeError as exc:
            raise PluginDefinitionError(f"plugin {name!r}: bad 'Config': {exc}") from None
    return PluginSpec(
        target=plugin,
        name=name,
        inject=inject,
        optional=optional,
        provides=provides,
        config_model=config_model,
        apply=_apply_of(plugin, name),
        module=module,
        attr=attr,
    )


def _names_of(plugin: object, name: str, field: str) -> tuple[str, ...]:
    """The service names of a plugin's ``inject``, ``optional`` or ``provides``
    (each a list of names or :class:`ServiceKey` objects)."""
    names = getattr(plugin, field, ())
    if isinstance(names, str) or not all(isinstance(i, str | ServiceKey) for i in names):
        raise PluginDefinitionError(
            f"plugin {name!r}: {field!r} must be a list of service names or service keys"
        )
    return tuple(service_name(i) for i in names)


def _apply_of(plugin: object, name: str) -> Apply:
    if isinstance(plugin, type):
        cls = plugin

        async def construct(ctx: Context, config: Any) -> None:
            instance = cls(ctx, config)
            start = getattr(instance, "start", None)
            if start is not None:
                result = start()
                if inspect.isawaitable(result):
                    await result

        return construct
    apply = plugin if inspect.isfunction(plugin) else getattr(plugin, "apply", None)
    if not callable(apply):
        raise PluginDefinitionError(
            f"plugin {name!r} ({plugin!r}) is not a plugin: expected a module or object "
            "with an apply(ctx, config) function, or a class"
        )

    async def call(ctx: Context, config: Any) -> None:
        result = apply(ctx, config)
        if inspect.isawaitable(result):
            await result

    return call


def _find_attr(module: str | None, target: object) -> str | None:
    if module is None or module not in sys.modules:
        return None
    for key, value in vars(sys.modules[module]).items():
        if value is target:
            return key
    return None

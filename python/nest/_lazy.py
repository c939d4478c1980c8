"""Lazy package exports: a package names what it offers without importing it.

``import nest`` (or a subpackage) must not pay for numpy, networkx or the sweep machinery
that a command may never touch (issue 19: start-up before the search begins <= 0.15 s).
Each package lists its public names and the module that defines them; PEP 562's module
``__getattr__`` imports that module on first access and caches the object in the
package's namespace, so later accesses cost a dict lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names load on demand.

    ``namespace`` is the package's ``globals()``; ``exports`` maps each public name to the
    module that defines it, relative to the package (``".search"``). A name equal to its
    module's last component is refused: importing the submodule binds that attribute on
    the package first, and the lazy name would silently be the module instead of the
    object. Such names must be imported eagerly.
    """
    package = namespace["__name__"]
    shadowed = sorted(name for name, module in exports.items() if module.rsplit(".", 1)[-1] == name)
    if shadowed:
        raise ValueError(f"{package}: {shadowed} would be shadowed by their submodules; import them eagerly")

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__

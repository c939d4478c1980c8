#!/usr/bin/env python3
"""The package's architecture rules, checked over its import graph (standard library only).

usage: python scripts/check_imports.py [--graph]   (from the repository root)

Every module of ``python/nest`` sits on a floor (:data:`FLOORS`, lowest first: a
subpackage or a top-level module). The rules:

* no import cycles among modules (module-level and function-local imports alike);
* no upward import: a module imports only modules on its own floor or lower ones;
* no private name across modules: ``from x import _name`` (or ``module._name``) only
  inside the module that defines it (the compiled core ``nest._core`` is private to
  its two doors, :mod:`nest.dp.engine` and :mod:`nest.network.kernels`);
* no Python file above :data:`MAX_LINES` lines.

It prints each violation on one line and the counts; ``--graph`` also prints every
intra-package import edge. Exit 1 when a rule is broken.
"""

from __future__ import annotations

import ast
import os
import sys

ROOT = os.path.join("python", "nest")
PACKAGE = "nest"
MAX_LINES = 700

FLOORS = (
    ("errors", "units", "frozen_graph", "_lazy", "arrays", "jsontext"),
    ("specs", "degrees"),
    ("parallel",),
    ("frameworks",),
    ("network",),
    ("cost",),
    ("presets",),
    ("inputs",),
    ("dp",),
    ("schedule",),
    ("search",),
    ("result",),
    ("planner",),
    ("report",),
    ("studies",),
    ("cli", "cli_args", "__main__", "__init__", "topology", "hf"),
)
"""Floors, lowest first: the first component of a module's name below ``nest``."""

CORE_DOORS = ("nest.dp.engine", "nest.network.kernels")
"""The only modules that may import the compiled core: the stage DP and schedule, and
the routing kernels."""


def modules(root: str) -> dict[str, str]:
    """Module name -> file path of every ``.py`` file under ``root``."""
    out = {}
    base = os.path.dirname(os.path.normpath(root))
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return out


def floor(module: str) -> int:
    """The floor of a module (``nest`` itself: its ``__init__``)."""
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    for level, names in enumerate(FLOORS):
        if head in names:
            return level
    raise SystemExit(f"check_imports: module {module} is on no floor; add it to FLOORS")


def imports(module: str, path: str, known: dict[str, str]):
    """``(target module, imported names, line, function-local)`` of every intra-package
    import of ``module``."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_package = path.endswith("__init__.py")
    local_lines = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
                continue
            names = [a.name for a in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in known or f"{target}.{n}" == "nest._core"]
            for sub in submodules:
                yield sub, [], node.lineno, node.lineno in local_lines
            rest = [n for n in names if f"{target}.{n}" not in submodules]
            if rest or not submodules:
                yield target, rest, node.lineno, node.lineno in local_lines
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    yield alias.name, [], node.lineno, node.lineno in local_lines


def private_attributes(path: str, known: dict[str, str], module: str):
    """``(line, alias, attribute)`` of every ``alias._name`` where ``alias`` is a package
    module imported into ``module``."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PACKAGE):
                    aliases.add(a.asname or a.name.split(".")[0])
    module_aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name[:1].islower() and (a.asname or a.name) in aliases:
                    module_aliases.add(a.asname or a.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module_aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            yield node.lineno, node.value.id, node.attr


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of two or more modules (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    known = modules(ROOT)
    problems, edges, local = [], {m: set() for m in known}, 0
    for module, path in sorted(known.items()):
        lines = sum(1 for _ in open(path, encoding="utf-8"))
        if lines > MAX_LINES:
            problems.append(f"{path}: {lines} lines (at most {MAX_LINES})")
        for target, names, line, is_local in imports(module, path, known):
            local += is_local
            where = f"{path}:{line}"
            if target == "nest._core":
                if module not in CORE_DOORS:
                    problems.append(f"{where}: imports the compiled core; only {' and '.join(CORE_DOORS)} may")
                continue
            if target not in known:
                problems.append(f"{where}: imports {target}, which is not a module of the package")
                continue
            if target != module and not module.startswith(target + "."):
                edges[module].add(target)
                if floor(target) > floor(module):
                    problems.append(f"{where}: {module} (floor {floor(module)}) imports {target} "
                                    f"(floor {floor(target)}): an upward import")
            for name in names:
                if name.startswith("_") and not name.startswith("__") and target != module:
                    problems.append(f"{where}: imports the private name {target}.{name}")
            if "--graph" in argv:
                print(f"{module} -> {target}{' (function-local)' if is_local else ''}")
        for line, alias, attribute in private_attributes(path, known, module):
            if not (module in CORE_DOORS and alias == "_core"):
                problems.append(f"{path}:{line}: uses the private name {alias}.{attribute}")
    for component in cycles(edges):
        problems.append("import cycle: " + " <-> ".join(component))
    for problem in problems:
        print(problem)
    print(f"{len(known)} modules, {sum(map(len, edges.values()))} import edges "
          f"({local} function-local), {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

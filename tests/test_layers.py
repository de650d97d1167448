"""Imports point down the layers: the rule of the design, read from the code itself.

Every `import` and `from ... import` of the package is parsed with `ast` and its layer
pair looked up in ALLOWED. A new edge is a decision to make here, in the open, not an
accident found a year later when two layers can no longer be told apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "appliance"
# Layer -> the layers it may import. The package root (`__version__`) is open to all.
BOTTOM = {"errors"}
ALLOWED = {
    "errors": set(),
    # The reader of answers from outside (runtime/reader.py) applies domain's JSON and YAML
    # rules, the ones request bodies are read by: one depth check for both directions.
    "runtime": BOTTOM | {"domain"},
    "domain": BOTTOM,
    # The store reads client rows into the domain's value (domain/clients.py) and keeps
    # the SQL forms of its rules; domain imports nothing of the store back.
    "store": BOTTOM | {"runtime", "domain"},
    "links": BOTTOM | {"domain"},
    "core": BOTTOM | {"runtime", "domain"},
    "services": BOTTOM | {"runtime", "domain", "store", "links", "core"},
    "sub": BOTTOM | {"runtime", "domain", "services"},
    "web": BOTTOM | {"runtime", "domain", "services"},
    "config": BOTTOM,
    "app": BOTTOM
    | {"config", "runtime", "domain", "store", "links", "core", "services", "sub", "web"},
    # A subscription worker process: composed like `app`, without the core or the panel.
    "sub_worker": BOTTOM | {"runtime", "domain", "store", "links", "services", "sub", "web"},
    "cli": BOTTOM | {"runtime", "domain", "store", "core", "services", "app", "config"},
    # `mtproto-proxy` starts the MTProto process (core) without the command line's set-up.
    "__main__": {"cli", "sub_worker", "core"},
}


def layer_of(module: str) -> str:
    """`appliance.services.clients.records` -> `services`; the root itself -> ``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "appliance":
                found.extend(f"appliance.{alias.name}" for alias in node.names)
            elif node.module.startswith("appliance."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if a.name.startswith("appliance."))
    return found


def module_layer(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def edges() -> list[tuple[str, str, str]]:
    """(file, its layer, the layer it imports) for every import across layers."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_layer(path)
        for module in imported_modules(ast.parse(path.read_text(), str(path))):
            target = layer_of(module)
            if target in ("", "__version__", source):
                continue
            found.append((str(path.relative_to(PACKAGE.parent)), source, target))
    return found


def test_every_module_belongs_to_a_known_layer():
    layers = {module_layer(path) for path in PACKAGE.rglob("*.py")}
    assert layers - {"__init__"} <= set(ALLOWED), sorted(layers - set(ALLOWED))


def test_imports_point_down_only():
    wrong = [
        f"{path}: {source} imports {target}"
        for path, source, target in edges()
        if target not in ALLOWED[source]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_an_upward_import():
    tree = ast.parse("from appliance.services.clients.records import Clients\n")
    assert [layer_of(m) for m in imported_modules(tree)] == ["services"]
    assert "services" not in ALLOWED["store"]

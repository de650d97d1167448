"""Imports point down the layers: the rule of the design, read from the code itself.

Every `import` and `from ... import` of the package is parsed with `ast` and its layer
pair looked up in ALLOWED. A new edge is a decision to make here, in the open, not an
accident found a year later when two layers can no longer be told apart.

The services layer has an order of its own: each service package (clients, inbounds,
control ...) may import only the packages SERVICE_ALLOWED gives it, and that table has
no cycle, so two packages never lean on each other. And it holds no SQL: every statement
lives in the store, behind a function whose name says what it reads or writes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "appliance"
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
    # The MTProto proxy and its driver: child environment and egress guard, nothing more.
    "mtproto": BOTTOM | {"runtime"},
    "services": BOTTOM | {"runtime", "domain", "store", "links", "core", "mtproto"},
    "sub": BOTTOM | {"runtime", "domain", "services"},
    "web": BOTTOM | {"runtime", "domain", "services"},
    "config": BOTTOM,
    "app": BOTTOM
    | {"config", "runtime", "domain", "store", "links", "core", "services", "sub", "web"},
    # A subscription worker process: composed like `app`, without the core or the panel.
    "sub_worker": BOTTOM | {"runtime", "domain", "store", "links", "services", "sub", "web"},
    "cli": BOTTOM | {"runtime", "domain", "store", "core", "services", "app", "config"},
    # `mtproto-proxy` starts the MTProto process without the command line's set-up.
    "__main__": {"cli", "sub_worker", "mtproto"},
}

SERVICES = PACKAGE / "services"
# Service package -> the service packages it may import, lowest first: what a package
# needs of one above it moves down (to domain/, runtime/ or the lower package) instead.
SERVICE_ALLOWED = {
    # Webhooks are raised by the packages above them, into an outbox that knows none.
    "webhooks": set(),
    "accounts": {"webhooks"},
    "tools": set(),
    "outbounds": set(),
    # Inbound records show their clients (settings.clients, clientStats) through the
    # client views of domain/client_views.py, not through the clients package.
    "inbounds": set(),
    # Import review checks hosts, ports and outbound subscriptions of a backup.
    "admin": {"inbounds", "outbounds"},
    # The supervisor reads the core template setting and the ports inbounds hold.
    "control": {"admin", "inbounds"},
    # Clients render links of inbounds, read the core's access log, fit inbound ciphers.
    "clients": {"admin", "control", "inbounds", "webhooks"},
    "nodes": {"admin", "clients", "inbounds", "webhooks"},
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


def service_package_of(module: str) -> str:
    """`appliance.services.clients.records` -> `clients`; `` outside the services."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "services" else ""


def service_edges() -> list[tuple[str, str, str]]:
    """(file, its service package, the service package it imports) across packages."""
    found = []
    for path in sorted(SERVICES.glob("*/**/*.py")):
        source = path.relative_to(SERVICES).parts[0]
        for module in imported_modules(ast.parse(path.read_text(), str(path))):
            target = service_package_of(module)
            if target not in ("", source):
                found.append((str(path.relative_to(PACKAGE.parent)), source, target))
    return found


def cycle_in(table: dict[str, set[str]]) -> list[str]:
    """The packages along one cycle of `table`, the first repeated at the end; []
    when it has none."""

    def walk(package: str, path: list[str]) -> list[str]:
        if package in path:
            return [*path[path.index(package) :], package]
        for target in sorted(table.get(package, ())):
            found = walk(target, [*path, package])
            if found:
                return found
        return []

    for package in sorted(table):
        found = walk(package, [])
        if found:
            return found
    return []


def test_every_service_package_has_a_place_in_the_order():
    packages = {path.name for path in SERVICES.iterdir() if (path / "__init__.py").exists()}
    assert packages == set(SERVICE_ALLOWED)


def test_service_packages_import_down_only():
    wrong = [
        f"{path}: services.{source} imports services.{target}"
        for path, source, target in service_edges()
        if target not in SERVICE_ALLOWED[source]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_service_order_has_no_cycle():
    assert cycle_in(SERVICE_ALLOWED) == []


def test_the_check_sees_a_cycle_between_two_packages():
    tree = ast.parse("from appliance.services.clients.query import slim_entry\n")
    assert [service_package_of(m) for m in imported_modules(tree)] == ["clients"]
    assert "clients" not in SERVICE_ALLOWED["inbounds"]
    assert cycle_in({"tools": set(), "inbounds": {"clients"}, "clients": {"inbounds"}}) == [
        "clients",
        "inbounds",
        "clients",
    ]
    cycle = cycle_in({**SERVICE_ALLOWED, "inbounds": {"clients"}})
    assert {"clients", "inbounds"} <= set(cycle) and cycle[0] == cycle[-1]


# A statement as this code base writes one, in capitals: text that starts with one (or
# with a sub-select), or holds a whole clause of one. Prose ("select a row", "updated")
# and an HTTP method alone ("DELETE") do not match.
SQL_STATEMENT = re.compile(
    r"^\s*\(?(SELECT|UPDATE|INSERT|DELETE)\s+\S"
    r"|\bSELECT\s.*\bFROM\s|\bINSERT\s+INTO\s|\bDELETE\s+FROM\s|\bUPDATE\s+\w+\s+SET\s",
    re.DOTALL,
)


def sql_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string constant and f-string that holds an SQL statement,
    in line order; an f-string is read whole, each of its values as `{}`."""
    parts = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
            )
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts
        ):
            text = node.value
        else:
            continue
        if SQL_STATEMENT.search(text):
            found.append((node.lineno, text))
    return sorted(found)


def test_services_hold_no_sql():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text[:60]}"
        for path in sorted(SERVICES.rglob("*.py"))
        for line, text in sql_strings(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, "move these statements into appliance/store/:\n" + "\n".join(found)


def test_the_check_sees_an_sql_string():
    tree = ast.parse(
        '"""Select the rows to update, then delete from the list: SELECT is a word here."""\n'
        'rows = store.rows(f"SELECT {COLUMNS} FROM audit_entry WHERE at < ?", [cutoff])\n'
        'store.execute("UPDATE node SET dirty = ? " "WHERE id = ?", [True, node_id])\n'
        'link.call("DELETE", f"/panel/api/inbounds/del/{inbound_id}")\n'
        'condition = "(SELECT 1 FROM client_inbound ci WHERE ci.client_id = c.id)"\n'
    )
    assert sql_strings(tree) == [
        (2, "SELECT {} FROM audit_entry WHERE at < ?"),
        (3, "UPDATE node SET dirty = ? WHERE id = ?"),
        (5, "(SELECT 1 FROM client_inbound ci WHERE ci.client_id = c.id)"),
    ]


def test_no_module_is_over_800_lines():
    """A module past 800 lines holds more than one idea: split it along the seam a reader
    would recognise before it grows into the 3,000-line files of the panels we learn from."""
    long = {
        str(path.relative_to(PACKAGE.parent)): count
        for path in PACKAGE.rglob("*.py")
        if (count := len(path.read_text().splitlines())) > 800
    }
    assert long == {}

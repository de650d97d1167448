"""The subscription server asks `Subscriptions` by name and never reaches behind it.

`appliance/sub/` and the subscription worker hold a `Subscriptions`; every attribute they
take of it must be one of its public methods (`lookup`, `render`, `month` ...), not a
part of its inside (`reads`, `store`), so the service can change how it reads and caches
without the door noticing. The check reads the code with `ast`, like test_layers.
"""

from __future__ import annotations

import ast
import inspect

from helpers import ROOT

from appliance.services.clients.subscriptions import Subscriptions

PACKAGE = ROOT / "appliance"
DOOR = [*sorted((PACKAGE / "sub").glob("*.py")), PACKAGE / "sub_worker.py"]


def asked_of_subscriptions(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, attribute) of every `subscriptions.X` and `self.subscriptions.X`."""
    asked = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        named = isinstance(holder, ast.Name) and holder.id == "subscriptions"
        held = isinstance(holder, ast.Attribute) and holder.attr == "subscriptions"
        if named or held:
            asked.append((node.lineno, node.attr))
    return asked


def public_methods() -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(Subscriptions, inspect.isfunction)
        if not name.startswith("_")
    }


def test_the_door_calls_only_methods_of_subscriptions():
    methods = public_methods()
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: subscriptions.{attribute}"
        for path in DOOR
        for line, attribute in asked_of_subscriptions(ast.parse(path.read_text()))
        if attribute not in methods
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_reach_behind_the_face():
    tree = ast.parse("self.subscriptions.reads.rows(statement, [])\nsubscriptions.store\n")
    assert sorted(asked_of_subscriptions(tree)) == [(1, "reads"), (2, "store")]
    assert {"reads", "store"}.isdisjoint(public_methods())

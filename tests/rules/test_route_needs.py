"""Route tables say what they use: each takes a frozen dataclass, declared beside its
routes, of exactly the services and callables those routes call, never the whole panel.

Read from the code itself: the signatures, the dataclasses' field types (resolved, with
the names a module imports only for type checking), the attributes the routes read, and
the calls in the composition root.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import appliance
from appliance.app import Panel

WEB = Path(appliance.__file__).parent / "web"
# It describes the other routes, and takes them rather than any part of the panel.
TAKES_ROUTES = {"openapi_routes"}


def table_builders() -> list[tuple[object, Callable]]:
    """(module, function) for every `*_routes` function of the web layer, and `build_app`."""
    found = []
    for path in sorted(WEB.glob("*.py")):
        module = importlib.import_module(f"appliance.web.{path.stem}")
        for name, function in vars(module).items():
            if not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue
            if (name.endswith("_routes") and name not in TAKES_ROUTES) or name == "build_app":
                found.append((module, function))
    return found


BUILDERS = table_builders()


def needs_of(module, function: Callable) -> type:
    """The class of the function's first parameter, looked up in its own module."""
    parameter = next(iter(inspect.signature(function).parameters.values()))
    annotation = parameter.annotation
    assert isinstance(annotation, str) and annotation.isidentifier(), (
        f"{function.__qualname__}({parameter.name}) names no declared type: {annotation!r}"
    )
    return getattr(module, annotation)


def hint_namespace(module) -> dict:
    """The module's names plus those it imports under `if TYPE_CHECKING:`."""
    names = dict(vars(module))
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            exec(compile(ast.Module(node.body, []), module.__file__, "exec"), names)
    return names


def test_every_table_builder_is_found():
    names = {function.__name__ for _, function in BUILDERS}
    assert {"client_routes", "group_routes", "session_routes", "ui_routes", "build_app"} <= names


@pytest.mark.parametrize("module, function", BUILDERS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_table_takes_a_frozen_dataclass_of_its_needs(module, function):
    parameters = list(inspect.signature(function).parameters)
    assert "panel" not in parameters
    needs = needs_of(module, function)
    assert dataclasses.is_dataclass(needs) and needs.__dataclass_params__.frozen, needs
    assert needs.__module__ == module.__name__, f"{needs.__name__} belongs beside its routes"
    assert needs is not Panel


@pytest.mark.parametrize("module, function", BUILDERS, ids=lambda v: getattr(v, "__name__", ""))
def test_needs_name_real_types(module, function):
    needs = needs_of(module, function)
    namespace = hint_namespace(module)
    hints = typing.get_type_hints(needs, globalns=namespace)
    assert set(hints) == {field.name for field in dataclasses.fields(needs)}
    for name, hint in hints.items():
        assert hint not in (typing.Any, object, Panel), f"{needs.__name__}.{name}: {hint}"
        if getattr(hint, "_is_protocol", False):
            # A callable the panel provides: its parameters are named and typed too.
            assert typing.get_type_hints(hint.__call__, globalns=namespace)


@pytest.mark.parametrize("module, function", BUILDERS, ids=lambda v: getattr(v, "__name__", ""))
def test_needs_list_exactly_what_the_module_reads(module, function):
    """Every field is read somewhere in the module, and nothing else is read off it."""
    needs = needs_of(module, function)
    parameter = next(iter(inspect.signature(function).parameters))
    read = {
        node.attr
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, (ast.Name, ast.Attribute))
        and ast.unparse(node.value) in (parameter, f"self.{parameter}")
    }
    assert read == {field.name for field in dataclasses.fields(needs)}


def test_the_composition_root_hands_no_table_the_panel():
    calls = [
        (path.name, node)
        for path in sorted((WEB.parent / "app").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and (node.func.id.endswith("_routes") or node.func.id == "build_app")
    ]
    named = {call.func.id for _, call in calls}
    assert named >= {function.__name__ for _, function in BUILDERS}
    for name, call in calls:
        arguments = [*call.args, *(keyword.value for keyword in call.keywords)]
        assert not any(isinstance(a, ast.Name) and a.id in ("self", "panel") for a in arguments), (
            f"{name} line {call.lineno}: {call.func.id} is handed the whole panel"
        )

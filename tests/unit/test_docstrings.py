"""The docstring gate: kg.store, kg.ops and kg.mcp document their public API in numpydoc.

Every public function and method (a name without a leading ``_``, defined in the module, of a
module-level function or of a public class) is run through numpydoc's validator, and these of
its checks must pass:

* GL08: there is a docstring; SS01: it opens with a summary;
* PR02: no documented parameter that does not exist; PR07: each documented one has a description;
* RT03: a Returns section, when there is one, describes the value.

A Parameters or Returns section is not demanded (numpydoc's PR01, RT01, YD01 are off): the
common parameters (unit of work, caller, session, repository, branch, ...) are described once in
:mod:`kg.context`, and a section that restates a name and its annotation carries nothing.

numpydoc has no check of Raises, so this gate adds one (RS01): a function whose own body raises a
``kg.errors`` class names that class in its Raises section.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Iterator

import pytest
from numpydoc.docscrape import NumpyDocString
from numpydoc.validate import validate

import kg.errors

CHECKS = frozenset({"GL08", "SS01", "PR02", "PR07", "RT03"})
KG_ERRORS = frozenset(name for name, obj in vars(kg.errors).items()
                      if inspect.isclass(obj) and issubclass(obj, kg.errors.KGError))


def public_callables(package: str) -> Iterator[tuple[str, object]]:
    """(qualified name, function) of every public function and method defined in ``package``."""
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                yield f"{module.__name__}.{name}", obj
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if not attr.startswith("_") and inspect.isfunction(member):
                        yield f"{module.__name__}.{name}.{attr}", member


def raised_kg_errors(func: object) -> set[str]:
    """The ``kg.errors`` classes that ``func``'s own source raises by name."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return set()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
            if name in KG_ERRORS:
                found.add(name)
    return found


def docstring_problems(package: str) -> list[str]:
    problems = []
    for qualname, func in public_callables(package):
        result = validate(qualname)
        problems += [f"{qualname}: {code} {message}" for code, message in result["errors"] if code in CHECKS]
        raised = raised_kg_errors(func)
        if raised and inspect.getdoc(func):
            # numpydoc reads a Raises entry as a type ("kg.errors.NotFound") with a description.
            raises = NumpyDocString(inspect.getdoc(func))["Raises"]
            documented = {(entry.type or entry.name).rsplit(".", 1)[-1] for entry in raises}
            problems += [f"{qualname}: RS01 raises {name} but its Raises section does not name it"
                         for name in sorted(raised - documented)]
    return problems


@pytest.mark.parametrize("package", ["kg.store", "kg.ops", "kg.mcp"])
def test_public_api_has_numpydoc_docstrings(package):
    problems = docstring_problems(package)
    assert problems == [], f"{len(problems)} docstring problems:\n" + "\n".join(problems)

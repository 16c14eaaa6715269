"""The documentation's reference pages, generated from the code when the site is built.

``mkdocs.yml`` names this file as a hook: :func:`on_config` puts a page per OpenAPI tag into the
navigation, :func:`on_files` adds the generated pages to the site. Nothing generated is checked
in, so a page cannot drift from the code; ``tests/docs/`` builds the site and checks the pages.

Pages: ``reference/settings.md`` (:class:`kg.settings.Settings`, its fields and the numpydoc
``Attributes`` of its docstring), ``reference/cli.md`` (typer's own docs utility over the ``kg``
app), ``reference/http/<tag>.md`` (``api.app``'s OpenAPI document, one page per tag),
``reference/mcp-tools.md`` (the MCP server's tool list) and ``reference/error-codes.md``
(the classes of :mod:`kg.errors` with their codes and HTTP statuses).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kg.errors import KGError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the checkout's kg, not an installed one
    sys.path.insert(0, str(ROOT))

HTTP_METHODS = ("get", "put", "post", "patch", "delete", "head", "options")
HTTP_INDEX = "reference/http/index.md"


def _cell(text: object) -> str:
    """One Markdown table cell: one line, pipes escaped, reST roles (``:class:`X```) as code."""
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", " ".join(str(text).split())).replace("|", "\\|")


# -- settings ---------------------------------------------------------------------------------


def settings_descriptions() -> dict[str, str]:
    """Each Settings field's description, from the ``Attributes`` section of its docstring."""
    from numpydoc.docscrape import NumpyDocString  # type: ignore[import-untyped]

    from kg.settings import Settings

    described: dict[str, str] = {}
    for parameter in NumpyDocString(Settings.__doc__ or "")["Attributes"]:
        for name in parameter.name.split(","):
            described[name.strip()] = " ".join(" ".join(parameter.desc).split())
    return described


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None or value == []:
        return "unset"
    if isinstance(value, Path):
        return f"`./{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def settings_page() -> str:
    """``reference/settings.md``: one row per setting (its variable, default and meaning).

    Raises
    ------
    ValueError
        A field the docstring does not describe, or a description of no field.
    """
    from kg.settings import Settings

    described = settings_descriptions()
    fields = Settings.model_fields
    undocumented = sorted(set(fields) - set(described))
    stale = sorted(set(described) - set(fields))
    if undocumented or stale:
        raise ValueError(f"Settings docstring: undocumented {undocumented}, no such field {stale}")
    prefix = Settings.model_config.get("env_prefix", "")
    rows = [f"| `{prefix}{name.upper()}` | {_default(field)} | {_cell(described[name])} |"
            for name, field in fields.items()]
    return "\n".join([
        "# Settings",
        "",
        "Every setting is an environment variable (or a line of a `.env`-style environment). This page",
        "is generated from `kg/settings.py` when the site is built: the defaults are the code's, the",
        "meanings its docstring's. [Operating](../guides/operating.md) says how they fit together.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        *rows,
        "",
    ])


# -- CLI --------------------------------------------------------------------------------------


def cli_page() -> str:
    """``reference/cli.md``: every ``kg`` command, by typer's docs utility."""
    import typer
    from typer.cli import get_docs_for_click

    from kg.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="kg")
    body = get_docs_for_click(obj=command, ctx=ctx, name="kg", title="Command line: `kg`")
    return body.rstrip() + "\n"


# -- HTTP -------------------------------------------------------------------------------------


@cache
def openapi() -> dict[str, Any]:
    """The OpenAPI document of ``api.app`` (built on a throwaway data directory)."""
    from api.app import create_app
    from kg.settings import Settings

    with tempfile.TemporaryDirectory(prefix="kg-docs-") as data:
        return create_app(Settings(data_dir=Path(data))).openapi()


def http_tags() -> list[str]:
    """The tags of the OpenAPI document's operations, in the order of their first route."""
    tags: list[str] = []
    for operations in openapi()["paths"].values():
        for method, operation in operations.items():
            if method in HTTP_METHODS:
                for tag in operation.get("tags") or ["other"]:
                    if tag not in tags:
                        tags.append(tag)
    return tags


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](schemas.md#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    return f"`{schema.get('type', 'any')}`"


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"## `{method.upper()} {path}`", ""]
    if operation.get("summary"):
        lines += [f"**{operation['summary']}**", ""]
    if operation.get("description"):
        lines += [operation["description"].strip(), ""]
    parameters = operation.get("parameters") or []
    if parameters:
        lines += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
        for p in parameters:
            lines.append(f"| `{p['name']}` | {p['in']} | {_cell(_schema_name(p.get('schema', {})))} | "
                         f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |")
        lines.append("")
    body = (operation.get("requestBody") or {}).get("content", {})
    for media, content in body.items():
        lines += [f"Body ({media}): {_schema_name(content.get('schema', {}))}", ""]
    lines += ["| status | meaning |", "|---|---|"]
    for status, response in (operation.get("responses") or {}).items():
        contents: list[dict[str, Any]] = list(response.get("content", {}).values())
        schema = contents[0].get("schema") if contents else None
        shown = f" ({_schema_name(schema)})" if schema else ""
        lines.append(f"| {status} | {_cell(response.get('description', '') + shown)} |")
    lines.append("")
    return lines


def http_tag_page(tag: str) -> str:
    """``reference/http/<tag>.md``: the operations of one tag, their parameters and answers."""
    lines = [f"# HTTP: {tag}", "", f"The `{tag}` routes, generated from the OpenAPI document (`/openapi.json`).",
             "Errors have the shape of [Errors](../errors.md).", ""]
    for path, operations in openapi()["paths"].items():
        for method, operation in operations.items():
            if method in HTTP_METHODS and tag in (operation.get("tags") or ["other"]):
                lines += _operation(method, path, operation)
    return "\n".join(lines)


def http_schemas_page() -> str:
    """``reference/http/schemas.md``: every schema of the document, its fields and their types."""
    lines = ["# HTTP: schemas", "", "The request and response bodies of the HTTP API, from the OpenAPI document.", ""]
    for name, schema in sorted(openapi().get("components", {}).get("schemas", {}).items()):
        lines += [f"## {name}", ""]
        if schema.get("description"):
            lines += [schema["description"].strip(), ""]
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        if properties:
            lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
            for field, spec in properties.items():
                lines.append(f"| `{field}` | {_cell(_schema_name(spec))} | {'yes' if field in required else 'no'} | "
                             f"{_cell(spec.get('description', ''))} |")
            lines.append("")
    return "\n".join(lines)


def http_pages() -> dict[str, str]:
    """Every generated HTTP page by its path under ``docs/``."""
    pages = {f"reference/http/{tag}.md": http_tag_page(tag) for tag in http_tags()}
    pages["reference/http/schemas.md"] = http_schemas_page()
    return pages


# -- MCP --------------------------------------------------------------------------------------


def mcp_tools() -> list[Any]:
    """The MCP server's tools, as a client lists them (every tool registered)."""
    import anyio

    from kg.mcp.server import build_server, fixed_binding

    server = build_server(None, fixed_binding("repo", "main"))  # type: ignore[arg-type]  # listing needs no services
    return list(anyio.run(server.list_tools))


def mcp_page() -> str:
    """``reference/mcp-tools.md``: each tool's description, annotations and arguments."""
    lines = ["# MCP tools", "",
             "The tools of kg's MCP server, generated from the server's own tool list (what `tools/list`",
             "answers a key allowed every tool). [The MCP guide](../guides/mcp.md) says how to connect.", ""]
    for tool in mcp_tools():
        hints = tool.annotations
        kind = "read-only" if hints and hints.read_only_hint else "write"
        if hints and hints.idempotent_hint and kind == "write":
            kind += ", idempotent"
        lines += [f"## `{tool.name}`", "", f"{tool.description} ({kind})", ""]
        properties = tool.input_schema.get("properties") or {}
        required = set(tool.input_schema.get("required") or ())
        if properties:
            lines += ["| argument | type | default | meaning |", "|---|---|---|---|"]
            for name, spec in properties.items():
                default = "required" if name in required else f"`{json.dumps(spec['default'])}`" \
                    if "default" in spec else ""
                lines.append(f"| `{name}` | {_cell(_schema_name(spec))} | {_cell(default)} | "
                             f"{_cell(spec.get('description', ''))} |")
            lines.append("")
    return "\n".join(lines).replace("](schemas.md#", "](http/schemas.md#")


# -- errors -----------------------------------------------------------------------------------


def error_classes() -> list[type[KGError]]:
    """Every error class of :mod:`kg.errors`, base first, in definition order."""
    from kg import errors

    return [value for value in vars(errors).values()
            if isinstance(value, type) and issubclass(value, errors.KGError)]


def errors_page() -> str:
    """``reference/error-codes.md``: each error code, its class, its HTTP status and meaning."""
    from api.errors import STATUS

    lines = ["# Error codes", "",
             "Every code kg answers, generated from `kg/errors.py` (the classes) and `api/errors.py` (their",
             "HTTP statuses). The CLI exits 1 on each; MCP answers it as a tool error. [Errors](errors.md)",
             "describes the shape.", "",
             "| code | class | HTTP | meaning |", "|---|---|---|---|"]
    for cls in error_classes():
        status = next(STATUS[c] for c in cls.__mro__ if c in STATUS)
        summary = (cls.__doc__ or "").strip().split("\n\n", 1)[0]
        lines.append(f"| `{cls.code}` | `{cls.__name__}` | {status} | {_cell(summary)} |")
    return "\n".join(lines) + "\n"


# -- the site ---------------------------------------------------------------------------------


def pages() -> dict[str, str]:
    """Every generated page by its path under ``docs/``."""
    return {"reference/settings.md": settings_page(), "reference/cli.md": cli_page(),
            "reference/mcp-tools.md": mcp_page(), "reference/error-codes.md": errors_page(), **http_pages()}


def on_config(config: Any) -> Any:
    """mkdocs hook: the HTTP reference's navigation entry becomes a section, a page per tag."""

    def expand(items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            if isinstance(item, dict):
                ((title, value),) = item.items()
                if value == HTTP_INDEX:
                    tagged = [{tag: f"reference/http/{tag}.md"} for tag in http_tags()]
                    value = [{"Overview": HTTP_INDEX}, *tagged, {"Schemas": "reference/http/schemas.md"}]
                elif isinstance(value, list):
                    value = expand(value)
                item = {title: value}
            out.append(item)
        return out

    if config.get("nav"):
        config["nav"] = expand(config["nav"])
    return config


def changelog_page() -> str:
    """``changelog.md``: CHANGELOG.md as it is (the site cannot read a file outside ``docs/``)."""
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated pages."""
    from mkdocs.structure.files import File

    for path, content in {**pages(), "changelog.md": changelog_page()}.items():
        files.append(File.generated(config, path, content=content))
    return files

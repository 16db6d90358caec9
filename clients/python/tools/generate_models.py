#!/usr/bin/env python3
"""Generate ``src/slotd/models.py`` from the repository's ``openapi.json``.

Every schema of ``components.schemas`` becomes a ``TypedDict`` (objects, ``allOf`` as
inheritance), a ``Literal`` alias (string enums) or a type alias (``oneOf`` of arrays). Required
properties are plain keys, the others ``NotRequired``; ``["T", "null"]`` and ``oneOf`` with
``null`` become ``T | None``.

    python3 clients/python/tools/generate_models.py            # rewrite models.py
    python3 clients/python/tools/generate_models.py --check    # exit 1 if models.py is stale

``tests/test_models.py`` runs the same generation and fails when the checked-in file differs
from it, so a change to ``openapi.json`` cannot go unnoticed.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent
DEFAULT_SPEC = REPO / "openapi.json"
DEFAULT_OUT = PACKAGE / "src" / "slotd" / "models.py"

HEADER = '''\
"""Typed models of slotd's API, generated from ``openapi.json`` (OpenAPI 3.1).

Do not edit by hand: run ``python3 clients/python/tools/generate_models.py`` after the API
document changes (``tests/test_models.py`` fails until you do). Every response body is a plain
``dict`` at run time; these ``TypedDict`` classes describe its keys for type checkers and
readers. Times are Unix milliseconds unless a field says otherwise.
"""

# ruff: noqa: E501
from typing import Any, Literal, NotRequired, TypedDict, Union

__all__ = [
{exports}
]

# The API version these models were generated from (``info.version`` of the document).
API_VERSION = {api_version!r}
'''


def ref_name(ref: str) -> str:
    prefix = "#/components/schemas/"
    if not ref.startswith(prefix):
        raise SystemExit(f"unsupported $ref {ref!r}: only {prefix}NAME is handled")
    return ref[len(prefix) :]


def type_of(schema: dict[str, Any]) -> str:
    """The Python annotation of a property schema."""
    if "$ref" in schema:
        return ref_name(schema["$ref"])
    if "oneOf" in schema or "anyOf" in schema:
        options = schema.get("oneOf", schema.get("anyOf"))
        parts = [type_of(o) for o in options]
        # `None` last, as people write it.
        parts = [p for p in parts if p != "None"] + [p for p in parts if p == "None"]
        return " | ".join(dict.fromkeys(parts))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0])
    kind = schema.get("type")
    if kind is None:
        return "Any"
    if isinstance(kind, list):
        parts = [type_of({**schema, "type": k}) for k in kind]
        parts = [p for p in parts if p != "None"] + [p for p in parts if p == "None"]
        return " | ".join(dict.fromkeys(parts))
    if kind == "null":
        return "None"
    if kind == "string":
        if "enum" in schema:
            return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
        return "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "array":
        items = schema.get("items") or {}
        return f"list[{type_of(items)}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"dict[str, {type_of(extra)}]"
        return "dict[str, Any]"
    raise SystemExit(f"unsupported schema type {kind!r} in {schema}")


def comment(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    lines: list[str] = []
    for para in text.strip().splitlines():
        wrapped = textwrap.wrap(para, width=92 - len(indent)) or [""]
        lines.extend(f"{indent}#: {w}".rstrip() for w in wrapped)
    return lines


def docstring(text: str | None, indent: str) -> list[str]:
    body = (text or "").strip().replace('"""', "'''").replace("\\", "\\\\")
    if not body:
        return []
    out = [f'{indent}"""']
    for para in body.splitlines():
        wrapped = textwrap.wrap(para, width=92 - len(indent)) or [""]
        out.extend(f"{indent}{w}".rstrip() for w in wrapped)
    out.append(f'{indent}"""')
    # One line when it fits.
    if len(out) == 3 and len(indent) + len(out[1].strip()) + 6 <= 96:
        return [f'{indent}"""{out[1].strip()}"""']
    return out


def object_parts(schema: dict[str, Any]) -> tuple[list[str], dict[str, Any], set[str]]:
    """Bases, own properties and own required names of an object schema (``allOf`` folded)."""
    bases: list[str] = []
    props: dict[str, Any] = {}
    required: set[str] = set()
    for part in schema.get("allOf", []):
        if "$ref" in part:
            bases.append(ref_name(part["$ref"]))
        else:
            props.update(part.get("properties", {}))
            required |= set(part.get("required", []))
    props.update(schema.get("properties", {}))
    required |= set(schema.get("required", []))
    return bases, props, required


def quoted(annotation: str) -> str:
    """``annotation``, as a string when it names another schema (classes refer to ones defined
    later; no ``from __future__ import annotations``, so that ``NotRequired`` is seen at class
    creation and ``__required_keys__`` is right)."""
    names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"'[^']*'", "", annotation))
    if any(n[0].isupper() and n not in ("Any", "Literal", "None") for n in names):
        return '"' + annotation + '"'
    return annotation


def description_of(schema: dict[str, Any]) -> str | None:
    """A property's description, or that of the option of its ``oneOf`` that carries one."""
    if schema.get("description"):
        return str(schema["description"])
    for option in schema.get("oneOf", []) + schema.get("allOf", []):
        if option.get("description"):
            return str(option["description"])
    return None


def render_object(name: str, schema: dict[str, Any]) -> list[str]:
    bases, props, required = object_parts(schema)
    fields = []
    for prop, sub in props.items():
        annotation = quoted(type_of(sub))
        if prop not in required:
            annotation = f"NotRequired[{annotation}]"
        fields.append((prop, annotation, description_of(sub)))
    functional = any(keyword.iskeyword(p) or not p.isidentifier() for p, _, _ in fields)
    if functional:
        # A key Python cannot spell as a class attribute: the functional syntax.
        if bases:
            raise SystemExit(f"{name}: allOf with non-identifier keys is not handled")
        items = ", ".join(f"{p!r}: {a}" for p, a, _ in fields)
        lines = comment(schema.get("description"), "")
        lines.append(f"{name} = TypedDict({name!r}, {{{items}}})")
        return lines
    lines = [f"class {name}({', '.join(bases) or 'TypedDict'}):"]
    lines += docstring(schema.get("description"), "    ")
    for prop, annotation, description in fields:
        lines += comment(description, "    ")
        lines.append(f"    {prop}: {annotation}")
    if len(lines) == 1:
        lines.append("    pass")
    return lines


def order(schemas: dict[str, Any]) -> list[str]:
    """Schema names, each after the ones it inherits from (TypedDict bases must exist first)."""
    done: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for part in schemas[name].get("allOf", []):
            if "$ref" in part:
                visit(ref_name(part["$ref"]))
        done.append(name)

    for name in sorted(schemas):
        visit(name)
    return done


def generate(spec: dict[str, Any]) -> str:
    schemas: dict[str, Any] = spec["components"]["schemas"]
    # Enums first and unions last: aliases are evaluated at import, classes' annotations not.
    enums: list[str] = []
    classes: list[str] = []
    unions: list[str] = []
    for name in order(schemas):
        schema = schemas[name]
        if schema.get("type") == "string" and "enum" in schema:
            lines = comment(schema.get("description"), "")
            lines.append(f"{name} = {type_of(schema)}")
            enums.append("\n".join(lines))
        elif schema.get("type") == "object" or "allOf" in schema:
            classes.append("\n".join(render_object(name, schema)))
        elif "oneOf" in schema:
            lines = comment(schema.get("description"), "")
            lines.append(f"{name} = Union[{', '.join(type_of(o) for o in schema['oneOf'])}]")
            unions.append("\n".join(lines))
        else:
            raise SystemExit(f"schema {name}: unsupported shape {list(schema)}")
    blocks = ["\n\n".join(enums), *classes, *unions]
    exports = "\n".join(f"    {n!r}," for n in sorted(schemas))
    head = HEADER.format(exports=exports, api_version=spec["info"]["version"])
    return head + "\n\n" + "\n\n\n".join(blocks) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = generate(json.loads(args.spec.read_text()))
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(
                f"{args.out} is stale against {args.spec}; run "
                "python3 clients/python/tools/generate_models.py",
                file=sys.stderr,
            )
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(spec_names(args.spec))} schemas)")
    return 0


def spec_names(path: Path) -> list[str]:
    return list(json.loads(path.read_text())["components"]["schemas"])


if __name__ == "__main__":
    sys.exit(main())

"""The models are the document: every schema of ``openapi.json`` has its model with the same
properties, the same required ones and the same types, and nothing more; the generated file is
what the generator makes of today's document."""

from __future__ import annotations

import importlib.util
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, NotRequired, Union, get_args, get_origin

import pytest

from slotd import models

REPO = Path(__file__).resolve().parents[3]
SPEC = json.loads((REPO / "openapi.json").read_text())
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]
GENERATOR = Path(__file__).resolve().parents[1] / "tools" / "generate_models.py"


def load_generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("generate_models", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_py_is_generated_from_todays_openapi_json() -> None:
    generated = load_generator().generate(SPEC)
    current = Path(models.__file__).read_text()
    assert current == generated, (
        "src/slotd/models.py differs from what openapi.json gives: run "
        "python3 clients/python/tools/generate_models.py (and review the diff)"
    )


def test_every_schema_has_a_model_and_every_model_a_schema() -> None:
    assert set(models.__all__) == set(SCHEMAS)
    for name in SCHEMAS:
        assert hasattr(models, name), f"no model for schema {name}"


def merged(schema: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """All properties and required names of an object schema, ``allOf`` resolved."""
    props: dict[str, Any] = {}
    required: set[str] = set()
    for part in schema.get("allOf", []):
        if "$ref" in part:
            sub = SCHEMAS[part["$ref"].rsplit("/", 1)[1]]
        else:
            sub = part
        p, r = merged(sub)
        props.update(p)
        required |= r
    props.update(schema.get("properties", {}))
    required |= set(schema.get("required", []))
    return props, required


def expected_type(schema: dict[str, Any]) -> Any:
    """What the document says a property is, as a comparable value."""
    if "$ref" in schema:
        return ("ref", schema["$ref"].rsplit("/", 1)[1])
    if "oneOf" in schema:
        return frozenset(expected_type(s) for s in schema["oneOf"])
    kind = schema.get("type")
    if kind is None:
        return "any"
    if isinstance(kind, list):
        return frozenset(expected_type({**schema, "type": k}) for k in kind)
    if kind == "array":
        return ("list", expected_type(schema.get("items") or {}))
    if kind == "object":
        extra = schema.get("additionalProperties")
        return ("dict", expected_type(extra) if isinstance(extra, dict) and extra else "any")
    if kind == "string" and "enum" in schema:
        return ("enum", frozenset(schema["enum"]))
    return {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "null"}[kind]


def annotation_type(tp: Any) -> Any:
    """The same comparable value, from a model's resolved annotation."""
    origin = get_origin(tp)
    if origin is NotRequired:
        return annotation_type(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return frozenset(annotation_type(a) for a in get_args(tp))
    if origin is Literal:
        return ("enum", frozenset(get_args(tp)))
    if origin is list:
        return ("list", annotation_type(get_args(tp)[0]))
    if origin is dict:
        return ("dict", annotation_type(get_args(tp)[1]))
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if isinstance(tp, type) and typing.is_typeddict(tp):
        return ("ref", tp.__name__)
    return {str: "str", int: "int", float: "float", bool: "bool"}[tp]


def flatten(value: Any) -> Any:
    """Enum aliases are compared by their values: a ref to an enum schema is its values."""
    if isinstance(value, tuple) and value[0] == "ref" and "enum" in SCHEMAS[value[1]]:
        return ("enum", frozenset(SCHEMAS[value[1]]["enum"]))
    if isinstance(value, frozenset):
        flat = [flatten(v) for v in value]
        return frozenset(flat) if len(flat) > 1 else flat[0]
    if isinstance(value, tuple):
        return tuple(flatten(v) for v in value)
    return value


OBJECTS = [n for n, s in SCHEMAS.items() if s.get("type") == "object" or "allOf" in s]


@pytest.mark.parametrize("name", OBJECTS)
def test_object_models_match_their_schema(name: str) -> None:
    model = getattr(models, name)
    props, required = merged(SCHEMAS[name])
    hints = typing.get_type_hints(model, include_extras=True)
    assert set(hints) == set(props), f"{name}: model keys {sorted(hints)} vs schema {sorted(props)}"
    assert set(model.__required_keys__) == required, f"{name}: required keys differ"
    for prop, schema in props.items():
        want = flatten(expected_type(schema))
        have = flatten(annotation_type(hints[prop]))
        assert have == want, f"{name}.{prop}: model {hints[prop]} vs schema {schema}"


@pytest.mark.parametrize("name", [n for n, s in SCHEMAS.items() if "enum" in s])
def test_enum_models_match_their_schema(name: str) -> None:
    assert set(get_args(getattr(models, name))) == set(SCHEMAS[name]["enum"])


def test_union_models_match_their_schema() -> None:
    for name, schema in SCHEMAS.items():
        if "oneOf" in schema and "type" not in schema:
            have = {annotation_type(a) for a in get_args(getattr(models, name))}
            assert have == {expected_type(s) for s in schema["oneOf"]}, name


def test_a_changed_document_fails_the_comparison() -> None:
    """The check above can fail: a property added to the document is missing from the model."""
    changed = json.loads(json.dumps(SPEC))
    changed["components"]["schemas"]["Me"]["properties"]["quota"] = {"type": "integer"}
    assert load_generator().generate(changed) != Path(models.__file__).read_text()
    props, _ = merged(changed["components"]["schemas"]["Me"])
    assert set(typing.get_type_hints(models.Me)) != set(props)

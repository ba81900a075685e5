"""A checker for the subset of JSON Schema (draft 2020-12) that
results.schema.json uses, standard library only.

Supported keywords (validation vocabulary, JSON Schema Validation 2020-12,
sections 6.1-6.5): type (a name or a list), enum, const, minimum, pattern
(re.search, as the spec's ECMA-262 regexes are searched), minItems,
maxItems, required; applicators: properties, additionalProperties (a
boolean or a schema), items (one schema for all items), $ref to "#/..."
of the same document. Annotations ($schema, $id, $defs, title,
description, $comment) are ignored. Any other keyword is an error, so the
schema cannot silently use something this checker does not enforce.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "$comment"}
_SUPPORTED = {"type", "enum", "const", "minimum", "pattern", "minItems", "maxItems", "required",
              "properties", "additionalProperties", "items", "$ref"} | _ANNOTATIONS


class SchemaError(ValueError):
    """The schema itself uses something this checker does not support."""


def _type_ok(value, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise SchemaError(f"unknown type {name!r}")


def _equal(a, b) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


class Checker:
    def __init__(self, schema: dict):
        self.root = schema

    def _resolve(self, ref: str) -> dict:
        if not ref.startswith("#/"):
            raise SchemaError(f"only local $ref is supported, not {ref!r}")
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def errors(self, value, schema: dict | bool | None = None, where: str = "$") -> list[str]:
        """Every violation, as 'JSON path: what is wrong'; empty if valid."""
        schema = self.root if schema is None else schema
        if schema is True:
            return []
        if schema is False:
            return [f"{where}: not allowed here"]
        unknown = set(schema) - _SUPPORTED
        if unknown:
            raise SchemaError(f"schema at {where} uses unsupported keywords {sorted(unknown)}")
        out: list[str] = []
        if "$ref" in schema:
            out += self.errors(value, self._resolve(schema["$ref"]), where)
        if "type" in schema:
            names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_type_ok(value, n) for n in names):
                return out + [f"{where}: expected {' or '.join(names)}, got {type(value).__name__}"]
        if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
            out.append(f"{where}: {value!r} is not one of {schema['enum']}")
        if "const" in schema and not _equal(value, schema["const"]):
            out.append(f"{where}: must be {schema['const']!r}, is {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                out.append(f"{where}: {value} < minimum {schema['minimum']}")
        if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
        if isinstance(value, list):
            out += self._array(value, schema, where)
        if isinstance(value, dict):
            out += self._object(value, schema, where)
        return out

    def _array(self, value: list, schema: dict, where: str) -> list[str]:
        out = []
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{where}: {len(value)} items, at least {schema['minItems']} needed")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: {len(value)} items, at most {schema['maxItems']} allowed")
        if "items" in schema:
            for i, item in enumerate(value):
                out += self.errors(item, schema["items"], f"{where}[{i}]")
        return out

    def _object(self, value: dict, schema: dict, where: str) -> list[str]:
        out = [f"{where}: missing required field {name!r}"
               for name in schema.get("required", []) if name not in value]
        props = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                out += self.errors(item, props[key], f"{where}.{key}")
            elif "additionalProperties" in schema:
                out += self.errors(item, schema["additionalProperties"], f"{where}.{key}")
        return out


def load_schema(path: Path | None = None) -> dict:
    from .results import SCHEMA_PATH  # the schema shipped with the package
    return json.loads(Path(path or SCHEMA_PATH).read_text())


def validate(doc, schema: dict | None = None) -> list[str]:
    """Errors of `doc` against results.schema.json (or `schema`); [] if valid."""
    return Checker(schema if schema is not None else load_schema()).errors(doc)

#!/usr/bin/env python3
"""docs/openapi.yaml against the sbxd sources it describes (suite unit).

Fails when the spec and the server drift:
  1. the spec is structurally OpenAPI 3.1: the required keys, every $ref
     resolves, every operation has responses, path templates and path
     parameters agree, JSON request bodies refuse unknown fields;
  2. the (method, path) route table registered in host-tools/sbxd/daemon
     equals the spec's, with each route's key scope (x-sbxd-scope) and
     streamed body (x-sbxd-streamed-body; no 413 on it, 413 on the others);
  3. each route's request body fields (names, JSON types, integer bounds),
     query parameters and headers, as its handler reads them, equal the
     spec's;
  4. the error codes and their statuses in host-tools/sbxd/api/api_error.*,
     docs/api.md's table, the spec's ErrorCode enum and its per-status
     ErrorNNN schemas are the same.

Standard library plus PyYAML (python3-yaml). Usage: openapi_test.py SOURCE_ROOT
"""
import os
import re
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed")
    sys.exit(77)

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "..")
SBXD = os.path.join(ROOT, "host-tools", "sbxd")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
failures = []


def fail(message):
    failures.append(message)


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


# --- 1. the spec's structure ------------------------------------------------

spec = yaml.safe_load(read("docs", "openapi.yaml"))


def resolve(node, seen=()):
    """A node with its $ref (and the refs that one has) followed."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if ref in seen:
            raise ValueError(f"$ref cycle at {ref}")
        seen = seen + (ref,)
        node = lookup(ref)
    return node


def lookup(ref):
    if not ref.startswith("#/"):
        raise KeyError(f"{ref}: only local references are used here")
    node = spec
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{ref} does not resolve")
        node = node[part]
    return node


def walk_refs(node, where):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                try:
                    lookup(value)
                except KeyError as e:
                    fail(f"{where}: {e}")
            else:
                walk_refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            walk_refs(value, f"{where}/{i}")


def merged_properties(schema):
    """Properties and types of an object schema, through $ref and allOf."""
    schema = resolve(schema)
    props = dict(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        props.update(merged_properties(part))
    return props


def schema_types(schema):
    schema = resolve(schema)
    if "type" in schema:
        t = schema["type"]
        return set(t if isinstance(t, list) else [t])
    types = set()
    for key in ("oneOf", "anyOf"):
        for part in schema.get(key, []):
            types |= schema_types(part)
    return types


if not str(spec.get("openapi", "")).startswith("3.1."):
    fail(f"openapi is {spec.get('openapi')!r}, not 3.1.x")
for key in ("title", "version"):
    if not spec.get("info", {}).get(key):
        fail(f"info.{key} is missing")
if not isinstance(spec.get("paths"), dict) or not spec["paths"]:
    fail("paths is missing or empty")
walk_refs(spec, "#")

spec_routes = {}  # (METHOD, path) -> operation
operation_ids = set()
for path, item in spec.get("paths", {}).items():
    if not path.startswith("/v1/"):
        fail(f"path {path} is not under /v1")
    template = set(re.findall(r"\{(\w+)\}", path))
    path_params = [resolve(p) for p in item.get("parameters", [])]
    for method, op in item.items():
        if method not in METHODS:
            continue
        where = f"{method.upper()} {path}"
        spec_routes[(method.upper(), path)] = op
        if op.get("operationId") in operation_ids:
            fail(f"{where}: operationId {op.get('operationId')} is not unique")
        operation_ids.add(op.get("operationId"))
        responses = op.get("responses")
        if not responses:
            fail(f"{where}: no responses")
            continue
        params = path_params + [resolve(p) for p in op.get("parameters", [])]
        declared = {p["name"] for p in params if p.get("in") == "path"}
        if declared != template:
            fail(f"{where}: path parameters {sorted(declared)} are not the template's {sorted(template)}")
        for p in params:
            if "schema" not in p and "content" not in p:
                fail(f"{where}: parameter {p.get('name')} has no schema")
        for status, response in responses.items():
            if not re.fullmatch(r"[1-5][0-9][0-9]|default", str(status)):
                fail(f"{where}: response {status!r} is not a status")
                continue
            response = resolve(response)
            if "description" not in response:
                fail(f"{where} {status}: no description")
            if str(status)[0] in "45":
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                props = merged_properties(schema) if schema else {}
                if "code" not in props or props.get("status", {}).get("const") not in (None, int(status)):
                    fail(f"{where} {status}: not an Error of status {status}")
        body = op.get("requestBody")
        if body:
            body = resolve(body)
            json_schema = body.get("content", {}).get("application/json", {}).get("schema")
            if json_schema is not None and resolve(json_schema).get("additionalProperties") is not False:
                fail(f"{where}: the JSON request body does not refuse unknown fields "
                     "(additionalProperties: false)")

# --- 2. the route table in the C++ sources ----------------------------------

REGISTRATION = re.compile(
    r"\b(router_\.add|host_route|sandbox_route|route)\(\s*\"([A-Z]+)\"\s*,\s*([^,]+?)\s*,\s*"
    r"(&\w+::\w+|\[)([^;]*?)\);", re.S)
SCOPES = {"router_.add": "any", "host_route": "host", "sandbox_route": "sandbox", "route": "sandbox"}


def evaluate_path(expression, text, where):
    """A route pattern: string literals and std::string constants joined by +."""
    out = ""
    for part in (p.strip() for p in expression.split("+")):
        if part.startswith('"') and part.endswith('"'):
            out += part[1:-1]
            continue
        m = re.search(r"\b(?:const\s+)?std::string(?:_view)?\s+" + re.escape(part) + r"\s*=\s*\"([^\"]*)\"", text)
        if not m:
            fail(f"{where}: cannot read the route pattern {expression!r}")
            return None
        out += m.group(1)
    return out


code_routes = {}  # (METHOD, path) -> {scope, handler, streamed}
daemon = os.path.join(SBXD, "daemon")
sources = {}
for name in sorted(os.listdir(daemon)):
    if name.endswith(".cpp") and not name.endswith("_test.cpp"):
        sources[name] = strip_comments(read("host-tools", "sbxd", "daemon", name))
for name in ("requests.cpp", "fields.cpp"):
    sources[name] = strip_comments(read("host-tools", "sbxd", "api", name))

api_service = sources["api_service.cpp"]
# The guest routes are registered through ApiService::sandbox_route (the scope check).
if not re.search(r"guest_\.add_routes\(\s*\[this\][^;]*?sandbox_route\(", api_service, re.S):
    fail("api_service.cpp: the guest routes no longer go through sandbox_route; fix the scope rule here")

for name, text in sources.items():
    for m in REGISTRATION.finditer(text):
        kind, method, expression, handler, rest = m.groups()
        if kind == "route" and name != "guest_access.cpp":
            continue
        path = evaluate_path(expression, text, name)
        if path is None:
            continue
        if (method, path) in code_routes:
            fail(f"{name}: {method} {path} is registered twice")
        if handler == "[":
            inner = re.search(r"return\s+(?:this->)?(\w+)\(request", rest)
            handler = inner.group(1) if inner else None
        else:
            handler = handler.split("::")[1]
        code_routes[(method, path)] = {
            "scope": SCOPES[kind], "handler": handler, "streamed": "BodyMode::Streamed" in rest, "file": name}

if len(code_routes) < 10:
    fail(f"only {len(code_routes)} routes found in the sources: the extraction is broken")
for route in sorted(set(code_routes) - set(spec_routes)):
    fail(f"{route[0]} {route[1]} is registered by sbxd but not in docs/openapi.yaml")
for route in sorted(set(spec_routes) - set(code_routes)):
    fail(f"{route[0]} {route[1]} is in docs/openapi.yaml but sbxd does not register it")

for route in sorted(set(code_routes) & set(spec_routes)):
    code, op = code_routes[route], spec_routes[route]
    where = f"{route[0]} {route[1]}"
    if op.get("x-sbxd-scope") != code["scope"]:
        fail(f"{where}: x-sbxd-scope is {op.get('x-sbxd-scope')!r}, the code's is {code['scope']!r}")
    if bool(op.get("x-sbxd-streamed-body")) != code["streamed"]:
        fail(f"{where}: x-sbxd-streamed-body is not {code['streamed']}")
    statuses = set(op.get("responses", {}))
    if code["streamed"] == ("413" in statuses):
        fail(f"{where}: a {'streamed' if code['streamed'] else 'whole'} body "
             f"{'cannot be' if code['streamed'] else 'can be'} 413")
    for status in ("400", "401", "431", "500"):
        if status not in statuses:
            fail(f"{where}: every route can answer {status}; the spec does not list it")
    if code["scope"] != "any" and "403" not in statuses:
        fail(f"{where}: a scoped key gets 403 here; the spec does not list it")
    if "{" in route[1] and "404" not in statuses:
        fail(f"{where}: an unknown {{…}} is 404; the spec does not list it")

# --- 3. request fields, query parameters and headers, as handlers read them --

constants = {}
for header in ("requests.hpp", "sizes.hpp"):
    for m in re.finditer(r"inline constexpr [\w:]+ (k\w+) = ([^;]+);", read("host-tools", "sbxd", "api", header)):
        constants[m.group(1)] = m.group(2)


def evaluate_int(expression):
    text = expression.replace("'", "")
    text = re.sub(r"\b0([0-7]+)\b", r"0o\1", text)
    text = re.sub(r"(\d)(?:LL|ULL|L|U)\b", r"\1", text)
    for _ in range(4):
        text = re.sub(r"\bk\w+\b", lambda m: "(" + constants.get(m.group(0), m.group(0)) + ")", text)
    text = re.sub(r"(\d)(?:LL|ULL|L|U)\b", r"\1", text)
    if not re.fullmatch(r"[\d\s*+()o-]+", text):
        raise ValueError(f"cannot evaluate {expression!r}")
    return eval(text, {"__builtins__": {}})  # digits and arithmetic only, checked above


def function_body(name):
    """The body of a function (free or Class::name) in the sources read."""
    pattern = re.compile(r"(?:^|\n)[^\n;{}]*\b(?:\w+::)?" + re.escape(name) + r"\s*\((?:[^;{}]|\{\})*\)\s*(?:const\s*)?\{")
    for text in sources.values():
        m = pattern.search(text)
        if not m:
            continue
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        return text[m.end():i - 1]
    return None


FIELD = re.compile(r"\b\w+\.(string|boolean|integer|string_map|string_list)\(\s*\"(\w+)\"\s*(?:,\s*([^,()]+?)\s*,\s*([^()]+?)\s*)?\)")
JSON_TYPE = {"string": "string", "boolean": "boolean", "integer": "integer", "string_map": "object",
             "string_list": "array"}


def handler_reads(handler):
    """What a handler (and the parse_/helper functions it calls) reads of a request."""
    fields, queries, headers = {}, set(), set()
    todo, done = [handler], set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        body = function_body(name)
        if body is None:
            fail(f"cannot find the body of {name}")
            continue
        for m in FIELD.finditer(body):
            kind, field, low, high = m.groups()
            fields[field] = (JSON_TYPE[kind], low and evaluate_int(low), high and evaluate_int(high))
        for m in re.finditer(r"\b(?!query\b)\w+(?:\.|->)find\(\"(\w+)\"\)", body):
            fields.setdefault(m.group(1), (None, None, None))
        for m in re.finditer(r"query_value\((\"[\w-]+\"|\w+)\)", body):
            queries.add(literal_or_variable(m.group(1), body, m.start()))
        for m in re.finditer(r"query_params\(\s*request\s*,\s*\{([^}]*)\}\)", body):
            queries |= set(re.findall(r"\"(\w+)\"", m.group(1)))
        for m in re.finditer(r"key\s*!=\s*\"(\w+)\"", body):
            queries.add(m.group(1))
        for m in re.finditer(r"\.header\((\"[\w-]+\"|\w+)\)", body):
            headers.add(literal_or_variable(m.group(1), body, m.start()))
        for m in re.finditer(r"\b(parse_\w+|read_egress|only_path|read_path|idempotency_claim)\(", body):
            if m.group(1) not in ("parse_body", "parse_offset", "parse_duration", "parse_sandbox_state"):
                todo.append(m.group(1))
    return fields, queries, headers


def literal_or_variable(token, body, at):
    """A string literal, or the value last given to a variable before `at`."""
    if token.startswith('"'):
        return token.strip('"')
    values = re.findall(r"\b" + re.escape(token) + r"\s*=\s*\"([\w-]+)\"", body[:at])[-1:]
    if not values:
        fail(f"cannot tell what {token} names")
    return values[0] if values else token


for route in sorted(set(code_routes) & set(spec_routes)):
    code, op = code_routes[route], spec_routes[route]
    where = f"{route[0]} {route[1]}"
    fields, queries, headers = handler_reads(code["handler"])
    item = spec["paths"][route[1]]
    params = [resolve(p) for p in item.get("parameters", []) + op.get("parameters", [])]
    spec_queries = {p["name"] for p in params if p.get("in") == "query"}
    spec_headers = {p["name"] for p in params if p.get("in") == "header"}
    if queries != spec_queries:
        fail(f"{where}: the handler reads query parameters {sorted(queries)}, the spec has {sorted(spec_queries)}")
    headers.discard("Authorization")
    if headers != spec_headers:
        fail(f"{where}: the handler reads headers {sorted(headers)}, the spec has {sorted(spec_headers)}")
    body = resolve(op["requestBody"]) if "requestBody" in op else None
    json_schema = body and body.get("content", {}).get("application/json", {}).get("schema")
    if code["streamed"]:
        if not body or not {"application/octet-stream", "application/x-tar"} & set(body.get("content", {})):
            fail(f"{where}: a streamed body is application/octet-stream (or x-tar) in the spec")
        continue
    if not fields:
        if body:
            fail(f"{where}: the handler reads no body, the spec has one")
        continue
    if not json_schema:
        fail(f"{where}: the handler reads body fields {sorted(fields)}, the spec has no JSON body")
        continue
    props = merged_properties(json_schema)
    if set(props) != set(fields):
        fail(f"{where}: the body's fields are {sorted(fields)} in the code, {sorted(props)} in the spec")
    for field, (json_type, low, high) in fields.items():
        if field not in props:
            continue
        prop = resolve(props[field])
        types = schema_types(prop) - {"null"}
        if json_type and types != {json_type}:
            fail(f"{where}: {field} is {json_type} in the code, {sorted(types)} in the spec")
        if json_type == "integer" and (prop.get("minimum"), prop.get("maximum")) != (low, high):
            fail(f"{where}: {field} is {low} to {high} in the code, "
                 f"{prop.get('minimum')} to {prop.get('maximum')} in the spec")

# --- 4. the error codes -----------------------------------------------------

hpp = read("host-tools", "sbxd", "api", "api_error.hpp")
cpp = read("host-tools", "sbxd", "api", "api_error.cpp")
names = dict(re.findall(r"inline constexpr std::string_view (k\w+)\s*=\s*\"(\w+)\"", hpp))
code_statuses = {names[k]: int(s) for k, s in re.findall(r"\{code::(k\w+),\s*(\d+)\}", cpp) if k in names}
if set(code_statuses) != set(names.values()):
    fail(f"api_error.cpp gives statuses for {sorted(code_statuses)}, api_error.hpp names {sorted(names.values())}")
doc_statuses = {c: int(s) for s, c in re.findall(r"^\| (\d{3}) \| `(\w+)` \|", read("docs", "api.md"), re.M)}
if doc_statuses != code_statuses:
    fail(f"docs/api.md's error table {sorted(doc_statuses.items())} is not api_error.* "
         f"{sorted(code_statuses.items())}")
enum = resolve(spec["components"]["schemas"].get("ErrorCode", {})).get("enum", [])
if sorted(enum) != sorted(code_statuses) or len(enum) != len(set(enum)):
    fail(f"ErrorCode's enum {sorted(enum)} is not the codes of api_error.hpp {sorted(code_statuses)}")
by_status = {}
for c, s in code_statuses.items():
    by_status.setdefault(s, set()).add(c)
for status, codes in sorted(by_status.items()):
    schema = spec["components"]["schemas"].get(f"Error{status}")
    if schema is None:
        fail(f"components/schemas/Error{status} is missing")
        continue
    props = merged_properties(schema)
    if props.get("status", {}).get("const") != status or set(props.get("code", {}).get("enum", [])) != codes:
        fail(f"Error{status} does not have status {status} and the codes {sorted(codes)}")
for name in spec["components"]["schemas"]:
    if re.fullmatch(r"Error\d{3}", name) and int(name[5:]) not in by_status:
        fail(f"{name}: no code has status {name[5:]}")
for (method, path), op in spec_routes.items():
    for status in op.get("responses", {}):
        if str(status)[0] in "45" and int(status) not in by_status:
            fail(f"{method} {path}: {status} is no code's status")

for message in failures:
    print("FAIL:", message)
print(f"{len(code_routes)} routes, {len(code_statuses)} error codes; "
      f"{'FAILED: ' + str(len(failures)) if failures else 'all agree'}")
sys.exit(1 if failures else 0)

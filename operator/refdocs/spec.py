"""docs/reference/inferenceservice.md: every field of the CRD's schema (as operator/crdgen builds it from the spec
models) with its type, default, constraints and description, and every CEL rule with its message."""

from floodway.operator.crdgen.crd import PRINTER_COLUMNS, SHORT_NAME, build_crd
from floodway.operator.refdocs.table import cell, code, table
from floodway.operator.spec import GROUP, KIND, VERSION

_CONSTRAINTS = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "enum")


def _type(node: dict) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    if node.get("type") == "array":
        return f"array of {_type(node.get('items', {}))}"
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return node.get("type", "any")


def _constraints(node: dict) -> str:
    parts = []
    for key in _CONSTRAINTS:
        if key in node:
            exclusive = node.get("exclusiveMinimum" if key == "minimum" else "exclusiveMaximum")
            name = f"exclusive {key}" if key in ("minimum", "maximum") and exclusive is True else key
            parts.append(f"{name} {code(node[key])}")
    return "; ".join(parts)


def _default(node: dict) -> str:
    if "default" not in node:
        return ""
    if node.get("type") == "object" and "properties" in node:
        return "its fields' defaults"
    return code(node["default"])


def _sections(path: str, node: dict, out: list[str]) -> None:
    """One section per object: its fields, then its rules; nested objects and array items get their own."""
    props = node.get("properties", {})
    required = set(node.get("required", []))
    rows, nested = [], []
    for name, prop in props.items():
        child = prop["items"] if prop.get("type") == "array" else prop
        child_path = f"{path}.{name}" + ("[]" if prop.get("type") == "array" else "")
        kind = _type(prop)
        if child.get("properties"):
            kind += f" ([{child_path}](#{_anchor(child_path)}))"
            nested.append((child_path, child))
        item_notes = f"items: {_constraints(child)}" if child is not prop and _constraints(child) else ""
        notes = "; ".join(x for x in (_constraints(prop), item_notes, "required" if name in required else "") if x)
        rows.append((f"`{name}`", kind, _default(prop), notes, cell(prop.get("description", ""))))
    out.append(f"## {path}\n")
    if node.get("description"):
        out.append(cell(node["description"]) + "\n")
    if rows:
        out.append(table(("field", "type", "default", "constraints", "description"), rows))
    rules = node.get("x-kubernetes-validations", [])
    if rules:
        out.append("Rules (CEL, checked by the API server; `floodway up` checks the same in Python):\n")
        out.append(table(("rule", "message"), [(code(r["rule"]), cell(r["message"])) for r in rules]))
    for child_path, child in nested:
        _sections(child_path, child, out)


def _anchor(path: str) -> str:
    return "".join(c for c in path.lower() if c.isalnum() or c in "-_")


def render() -> str:
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = ["# InferenceService reference\n",
           f"`apiVersion: {GROUP}/{VERSION}`, `kind: {KIND}` (short name `{SHORT_NAME}`). "
           "Generated from the spec models (`operator/spec/`) through the CRD that `floodway crd` builds: "
           "`kubectl explain inferenceservice.spec.<field>` shows the same descriptions.\n"]
    rules = schema.get("x-kubernetes-validations", [])
    out.append("Rules on the whole object:\n")
    out.append(table(("rule", "message"), [(code(r["rule"]), cell(r["message"])) for r in rules]))
    _sections("spec", schema["properties"]["spec"], out)
    _sections("status", schema["properties"]["status"], out)
    out.append("## kubectl get columns\n")
    out.append(table(("column", "JSON path", "description"),
                     [(c["name"], code(c["jsonPath"]), cell(c.get("description", ""))) for c in PRINTER_COLUMNS]))
    return "\n".join(out)

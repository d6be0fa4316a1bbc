"""The three PATCH bodies the apiserver accepts: JSON merge (RFC 7386), JSON patch (RFC 6902)
and strategic merge.

Strategic merge is the apiserver's schema-driven variant for compiled-in types. Its schema comes
from Go struct tags; here the merge keys are a table by field name, which is exact for every list
a Pod, Namespace or Event carries that clients actually patch (containers, volumes, env, ports,
conditions, ownerReferences, finalizers). All functions are pure and return new objects; a
malformed patch raises ``ApiError`` (400 for bad syntax, 422 for a failed ``test`` op).
"""

from __future__ import annotations

import copy
from typing import Any

from multusd.kubesim.errors import ApiError, bad_request

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Lists merged element-wise by key, per the `patchMergeKey` struct tags of core/v1.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars merged as sets.
MERGE_SCALAR_LISTS = frozenset({"finalizers"})

_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_ORDER_PREFIX = "$setElementOrder/"
_DELETE_PRIMITIVE_PREFIX = "$deleteFromPrimitiveList/"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- JSON patch -------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise bad_request(f"invalid array index {token!r}")
    idx = int(token)
    limit = len(container) + (1 if allow_end else 0)
    if idx >= limit:
        raise bad_request(f"array index {idx} out of bounds")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise bad_request(f"path component {token!r} not found")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, allow_end=False)]
        else:
            raise bad_request(f"path component {token!r} is not a container")
    return cur


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise bad_request(f"path {'/'.join(tokens)!r} not found")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise bad_request(f"path {'/'.join(tokens)!r} not found")


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise bad_request("cannot remove the document root")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise bad_request(f"unable to remove nonexistent key: {last}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise bad_request(f"cannot remove from {'/'.join(tokens)!r}")


def _add(doc: Any, tokens: list[str], value: Any, *, replace: bool) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise bad_request(f"replace operation does not apply: doc is missing key: {last}")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, allow_end=False)] = value
        else:
            parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise bad_request(f"cannot add to {'/'.join(tokens)!r}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902, applied to a copy; any failing op rejects the whole patch."""
    if not isinstance(ops, list):
        raise bad_request(
            "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"
        )
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise bad_request("invalid JSON patch operation")
        kind = op["op"]
        path = op.get("path")
        if not isinstance(path, str):
            raise bad_request(f"JSON patch operation {kind!r} is missing 'path'")
        tokens = _pointer(path)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"JSON patch operation {kind!r} is missing 'value'")
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f"JSON patch operation {kind!r} is missing 'from'")
            from_tokens = _pointer(source)
            value = (
                _remove(doc, from_tokens)
                if kind == "move"
                else copy.deepcopy(_get(doc, from_tokens))
            )
            doc = _add(doc, tokens, value, replace=False)
        elif kind == "test":
            if _get(doc, tokens) != op["value"]:
                raise ApiError(
                    422, "Invalid", f"testing value {path} failed: the values are not equal"
                )
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc


# --- strategic merge --------------------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge of ``patch`` into ``target`` (both JSON-shaped)."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch body must be a JSON object")
    return _merge_map(target if isinstance(target, dict) else {}, patch)


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    body = {k: v for k, v in patch.items() if k != _DIRECTIVE}
    if directive == "replace":
        replaced: dict[str, Any] = _strip_directives(body)
        return replaced
    if directive not in (None, "merge"):
        raise bad_request(f"Unknown patch type: {directive}")
    result = dict(original)
    retain = body.pop(_RETAIN, None)
    for key, value in body.items():
        if key.startswith(_ORDER_PREFIX):
            continue
        if key.startswith(_DELETE_PRIMITIVE_PREFIX):
            field = key[len(_DELETE_PRIMITIVE_PREFIX) :]
            current = result.get(field)
            if isinstance(current, list) and isinstance(value, list):
                result[field] = [v for v in current if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, original: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(e, dict) and e.get(_DIRECTIVE) == "replace" for e in patch):
        return [_strip_directives(e) for e in patch if not _is_directive(e, "replace")]
    if field in MERGE_SCALAR_LISTS:
        union = list(original)
        union.extend(v for v in patch if v not in union)
        return union
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(e, dict) for e in patch):
        return [_strip_directives(e) for e in patch]
    result = [copy.deepcopy(e) for e in original]
    for element in patch:
        ident = element.get(key)
        position = next(
            (i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == ident),
            None,
        )
        if element.get(_DIRECTIVE) == "delete":
            if position is not None:
                result.pop(position)
            continue
        if position is None:
            result.append(_strip_directives(element))
        else:
            merged = _merge_map(result[position], element)
            if merged is None:
                result.pop(position)
            else:
                result[position] = merged
    return result


def _is_directive(element: Any, name: str) -> bool:
    return isinstance(element, dict) and element.get(_DIRECTIVE) == name and len(element) == 1


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if k not in (_DIRECTIVE, _RETAIN)
            and not k.startswith((_ORDER_PREFIX, _DELETE_PRIMITIVE_PREFIX))
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> Any:
    """Dispatch on the (already validated) patch media type."""
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if content_type == MERGE_PATCH:
        return merge_patch(target, patch)
    if content_type == STRATEGIC_PATCH:
        return strategic_merge_patch(target, patch)
    raise bad_request(f"unsupported patch type {content_type!r}")

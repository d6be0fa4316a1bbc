"""What the apiserver does to an object on create and update before storing it.

Server-set metadata (uid, creationTimestamp, generation), the per-kind defaults clients rely on
(a new pod is ``Pending``; a namespace is ``Active`` with its name label), and the subresource
rules: a PUT to the main resource keeps the stored ``status``, a PUT to ``status`` keeps the
stored ``spec``. Multus writes its network-status annotation through ``pods/status``; that works
on a real cluster because the pod status strategy keeps metadata changes, and it does here.
Validation is the part clients meet: names, and the total size of annotations (256 KiB), which
a network-status annotation can run into.
"""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

from multusd.kubesim import certresources
from multusd.kubesim.certresources import CERTIFICATE_SIGNING_REQUESTS
from multusd.kubesim.draresources import RESOURCE_CLAIMS
from multusd.kubesim.errors import bad_request, invalid, too_long
from multusd.kubesim.resources import NAMESPACES, PODS, ResourceType

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The alphabet of utilrand.String: no vowels or look-alikes, so generated names never spell words.
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# Fields only the server sets; a client's values are discarded on create.
_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "selfLink")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
"""kube-apiserver's ``TotalAnnotationSizeLimitB``: all of an object's annotation keys and values,
in bytes (apimachinery ``ValidateAnnotationsSize``), on every create and update, of any kind."""


def clone(value: Any) -> Any:
    """Copy a JSON-shaped value; several times faster than ``copy.deepcopy`` for this shape."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_type(rt: ResourceType, obj: dict[str, Any]) -> None:
    api_version = obj.setdefault("apiVersion", rt.api_version)
    kind = obj.setdefault("kind", rt.kind)
    if api_version != rt.api_version:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
    if kind != rt.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


def _check_namespace(rt: ResourceType, meta: dict[str, Any], namespace: str) -> None:
    if not rt.namespaced:
        meta.pop("namespace", None)
        return
    given = meta.get("namespace")
    if given and given != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = namespace


def _check_string_maps(meta: dict[str, Any]) -> None:
    """Labels and annotations are map[string]string in Go; anything else fails decoding there
    (a YAML ``app: yes`` arrives as a bool and the apiserver answers 400)."""
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise bad_request(
                f"json: cannot unmarshal {_go_type(value)} into Go struct field "
                f"ObjectMeta.metadata.{field} of type map[string]string"
            )
        for item in value.values():
            if not isinstance(item, str):
                raise bad_request(
                    f"json: cannot unmarshal {_go_type(item)} into Go struct field "
                    f"ObjectMeta.metadata.{field} of type string"
                )


def _go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def _validate_name(rt: ResourceType, name: str) -> None:
    pattern = _DNS_LABEL if rt is NAMESPACES else _DNS_SUBDOMAIN
    limit = 63 if rt is NAMESPACES else 253
    if len(name) > limit or not pattern.match(name):
        raise invalid(
            rt,
            name,
            [
                (
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 '
                    f"{'label' if rt is NAMESPACES else 'subdomain'} must consist of lower case "
                    "alphanumeric characters, '-' or '.', and must start and end with an "
                    "alphanumeric character",
                )
            ],
        )


def _validate_annotations_size(rt: ResourceType, name: str, meta: dict[str, Any]) -> None:
    """Refuse annotations past :data:`TOTAL_ANNOTATION_SIZE_LIMIT`, counted as Go's ``len``
    counts a string: UTF-8 bytes (values are strings by now: ``_check_string_maps``)."""
    annotations = meta.get("annotations") or {}
    total = sum(_utf8_len(key) + _utf8_len(value) for key, value in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        raise too_long(rt, name, "metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT)


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt is PODS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("serviceAccountName", "default")
        if not isinstance(obj.get("status"), dict) or not obj["status"]:
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt is NAMESPACES:
        name = obj["metadata"]["name"]
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}


def prepare_create(
    rt: ResourceType, obj: dict[str, Any], namespace: str, *, keep_status: bool = False
) -> dict[str, Any]:
    """Validate a create body and fill server-set fields (a new dict; the input is untouched).

    ``keep_status`` is for seeding: manifests describing running pods keep their status, as if
    restored from etcd; an API create resets a pod's status like the real strategy does.
    """
    obj = clone(obj)
    _check_type(rt, obj)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    if meta.get("resourceVersion"):
        raise bad_request("resourceVersion should not be set on objects to be created")
    _check_string_maps(meta)
    _check_namespace(rt, meta, namespace)
    name = meta.get("name")
    if not name:
        prefix = meta.get("generateName")
        if not prefix:
            raise invalid(
                rt, "", [("metadata.name", "Required value: name or generateName is required")]
            )
        name = prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
        meta["name"] = name
    _validate_name(rt, name)
    _validate_annotations_size(rt, name, meta)
    for key in _SERVER_META:
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    if rt.has_generation:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    if (rt is PODS or rt is RESOURCE_CLAIMS) and not keep_status:
        obj.pop("status", None)
    _defaults(rt, obj)
    if rt is CERTIFICATE_SIGNING_REQUESTS and not keep_status:
        certresources.prepare_create(rt, obj)  # the requester, an empty status; validation
    return obj


def parse_resource_version(value: Any, rt: ResourceType, name: str) -> int | None:
    """The precondition a body carries; "" or absent means none."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise invalid(
            rt,
            name,
            [("metadata.resourceVersion", f'Invalid value: "{value}": must be an integer')],
        ) from exc


def prepare_update(
    rt: ResourceType, new: dict[str, Any], old: dict[str, Any], subresource: str
) -> dict[str, Any]:
    """Merge an update body with the stored object per the kind's update strategy."""
    _check_type(rt, new)
    meta = new.get("metadata")
    if not isinstance(meta, dict):
        raise bad_request("the object provided is missing metadata")
    _check_string_maps(meta)
    old_meta = old["metadata"]
    if meta.get("name") != old_meta["name"]:
        raise bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({old_meta['name']})"
        )
    if rt.namespaced and meta.get("namespace", old_meta.get("namespace")) != old_meta.get(
        "namespace"
    ):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    for key in ("uid", "creationTimestamp", "deletionTimestamp", "namespace"):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    meta.pop("selfLink", None)
    if rt is CERTIFICATE_SIGNING_REQUESTS:
        certresources.prepare_update(rt, new, old, subresource)  # approval and status rules
    elif "status" in rt.subresources:
        if subresource == "status":
            if "spec" in old:
                new["spec"] = old["spec"]
            else:
                new.pop("spec", None)
            if rt is PODS:
                if "ownerReferences" in old_meta:
                    meta["ownerReferences"] = old_meta["ownerReferences"]
                else:
                    meta.pop("ownerReferences", None)
        elif "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if rt is NAMESPACES:
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = old_meta["name"]
    _validate_annotations_size(rt, old_meta["name"], meta)
    if rt.has_generation:
        generation = int(old_meta.get("generation", 1))
        changed = {
            k: v for k, v in new.items() if k not in ("metadata", "status", "apiVersion", "kind")
        }
        before = {
            k: v for k, v in old.items() if k not in ("metadata", "status", "apiVersion", "kind")
        }
        meta["generation"] = generation + 1 if changed != before else generation
    return new


def unchanged(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """True when an update changes nothing but the resourceVersion (the apiserver then skips the
    write and keeps the version, so no watch event fires)."""
    a = dict(new, metadata={k: v for k, v in new["metadata"].items() if k != "resourceVersion"})
    b = dict(old, metadata={k: v for k, v in old["metadata"].items() if k != "resourceVersion"})
    return a == b

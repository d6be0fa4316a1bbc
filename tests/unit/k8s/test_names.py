"""multusd.k8s.names: names that would walk an API path elsewhere are refused, in client-go's
words (``IsValidPathSegmentName`` and ``Request.Name``/``Namespace``), before any request."""

from __future__ import annotations

import pytest

from multusd.k8s.names import InvalidName, checked_name, checked_namespace, segment_problems
from multusd.k8s.pods import pod_path


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ("web-0", []),
        (".", ["may not be '.'"]),
        ("..", ["may not be '..'"]),
        ("../x", ["may not contain '/'"]),
        ("a%2Fb", ["may not contain '%'"]),
        ("a/%", ["may not contain '/'", "may not contain '%'"]),
    ],
)
def test_segment_problems_as_client_go(value: str, problems: list[str]) -> None:
    assert segment_problems(value) == problems


def test_the_errors_quote_the_name_as_go_does() -> None:
    with pytest.raises(InvalidName) as name:
        checked_name("../../secrets/x")
    assert str(name.value) == "invalid resource name \"../../secrets/x\": [may not contain '/']"
    with pytest.raises(InvalidName) as namespace:
        checked_namespace("..")
    assert str(namespace.value) == "invalid namespace \"..\": [may not be '..']"
    with pytest.raises(InvalidName, match=r"^resource name may not be empty$"):
        checked_name("")


def test_paths_are_built_only_from_valid_names() -> None:
    assert pod_path("default", "web-0") == "/api/v1/namespaces/default/pods/web-0"
    with pytest.raises(InvalidName):
        pod_path("default", "../../../api/v1/namespaces/kube-system/secrets/token")
    # A NAD GET names the object through the same rule (k8s/nads.py) before the library
    # quotes the path.
    with pytest.raises(InvalidName):
        checked_namespace("..")
    with pytest.raises(InvalidName):
        checked_name("a%2F..%2Fb")

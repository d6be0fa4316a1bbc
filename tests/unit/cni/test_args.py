"""``CNI_ARGS``: the daemon's strict envelope split and libcni's ``K8sArgs``
(docs/upstream.md, "CNI_ARGS, parsed twice")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cni_shim.errors import INVALID_ENVIRONMENT, CNIError
from multusd.cni.args import K8sArgs, join_args, parse_envelope_args, parse_k8s_args


def k8s_error(text: str) -> str:
    with pytest.raises(CNIError) as info:
        parse_k8s_args(text)
    assert info.value.code == INVALID_ENVIRONMENT
    return info.value.msg


# --- envelope -------------------------------------------------------------------------------


def test_envelope_pairs_trimmed() -> None:
    assert parse_envelope_args(" K8S_POD_NAME = a ; K8S_POD_NAMESPACE=b") == {
        "K8S_POD_NAME": "a",
        "K8S_POD_NAMESPACE": "b",
    }


def test_envelope_last_duplicate_wins_and_empty_value() -> None:
    assert parse_envelope_args("A=1;A=2;B=") == {"A": "2", "B": ""}


@pytest.mark.parametrize(
    ("text", "part"),
    [("A=b=c", "A=b=c"), ("", ""), ("A=1;", ""), ("A=1;B", "B"), ("A=1;;B=2", "")],
)
def test_envelope_needs_exactly_two_parts(text: str, part: str) -> None:
    with pytest.raises(CNIError) as info:
        parse_envelope_args(text)
    assert info.value.code == INVALID_ENVIRONMENT
    assert info.value.msg == f"invalid CNI_ARG '{part}'"


# --- K8sArgs --------------------------------------------------------------------------------


def test_k8s_empty_string() -> None:
    assert parse_k8s_args("") == K8sArgs()


def test_k8s_known_keys() -> None:
    args = parse_k8s_args(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod;"
        "K8S_POD_INFRA_CONTAINER_ID=sandbox;K8S_POD_UID=uid;IP=10.0.0.1"
    )
    assert args == K8sArgs("pod", "ns", "sandbox", "uid", "10.0.0.1")
    assert args.label() == "ns/pod/uid"


def test_k8s_values_not_trimmed_keys_case_sensitive() -> None:
    assert parse_k8s_args("K8S_POD_NAME= a ").pod_name == " a "
    assert k8s_error("k8s_pod_name=a") == 'ARGS: unknown args ["k8s_pod_name=a"]'


@pytest.mark.parametrize("text", ["A=b=c", "K8S_POD_NAME=a;", "novalue", "K8S_POD_NAME=a;;"])
def test_k8s_invalid_pair(text: str) -> None:
    bad = next(p for p in text.split(";") if len(p.split("=")) != 2)
    assert k8s_error(text) == f'ARGS: invalid pair "{bad}"'


@pytest.mark.parametrize("value", ["1", "true", "True", "TRUE", "tRuE"])
def test_ignore_unknown_true(value: str) -> None:
    assert parse_k8s_args(f"FOO=bar;IgnoreUnknown={value};K8S_POD_NAME=p").pod_name == "p"


@pytest.mark.parametrize("value", ["0", "false", "False"])
def test_ignore_unknown_false(value: str) -> None:
    assert k8s_error(f"IgnoreUnknown={value};FOO=bar") == 'ARGS: unknown args ["FOO=bar"]'


def test_ignore_unknown_order_independent() -> None:
    before = parse_k8s_args("IgnoreUnknown=true;FOO=bar;K8S_POD_UID=u")
    after = parse_k8s_args("FOO=bar;K8S_POD_UID=u;IgnoreUnknown=true")
    assert before == after == K8sArgs(pod_uid="u")


def test_ignore_unknown_last_value_wins() -> None:
    # Go assigns the field once per pair; the final assignment is what is checked.
    assert k8s_error("IgnoreUnknown=1;FOO=bar;IgnoreUnknown=0") == 'ARGS: unknown args ["FOO=bar"]'
    assert parse_k8s_args("IgnoreUnknown=0;FOO=bar;IgnoreUnknown=1") == K8sArgs()


@pytest.mark.parametrize(("value", "shown"), [("yes", "yes"), ("YES", "yes"), ("", "")])
def test_ignore_unknown_bad_bool(value: str, shown: str) -> None:
    assert k8s_error(f"IgnoreUnknown={value}") == (
        f'ARGS: error parsing value of pair "IgnoreUnknown={value}": '
        f"boolean unmarshal error: invalid input {shown}"
    )


@pytest.mark.parametrize("ip", ["1.2.3", "10.0.0.1/24", "fe80::1%eth0", "host", " 1.2.3.4"])
def test_bad_ip(ip: str) -> None:
    assert k8s_error(f"K8S_POD_NAME=a;IP={ip}") == (
        f'ARGS: error parsing value of pair "IP={ip}": invalid IP address: {ip}'
    )


@pytest.mark.parametrize("ip", ["10.0.0.1", "fd00::1", "::ffff:1.2.3.4", ""])
def test_good_ip(ip: str) -> None:
    # An empty value is Go's nil IP, not an error.
    assert parse_k8s_args(f"IP={ip}").ip == ip


def test_first_error_in_string_order_wins() -> None:
    assert k8s_error("IP=bad;A=b=c").startswith('ARGS: error parsing value of pair "IP=bad"')
    assert k8s_error("A=b=c;IP=bad") == 'ARGS: invalid pair "A=b=c"'


def test_unknown_args_listed_in_order() -> None:
    assert k8s_error("FOO=bar;K8S_POD_NAME=a;X=") == 'ARGS: unknown args ["FOO=bar" "X="]'


def test_join_args() -> None:
    assert join_args(()) == ""
    assert join_args((("IgnoreUnknown", "true"), ("K8S_POD_UID", ""))) == (
        "IgnoreUnknown=true;K8S_POD_UID="
    )


# --- properties -----------------------------------------------------------------------------

_TOKEN = st.text(
    alphabet=st.characters(exclude_characters=";=", exclude_categories=["Cs"]), max_size=12
)
_KEY = _TOKEN.map(str.strip).filter(bool)


@given(st.dictionaries(_KEY, _TOKEN.map(str.strip), min_size=1, max_size=8))
def test_envelope_round_trip(pairs: dict[str, str]) -> None:
    assert parse_envelope_args(join_args(tuple(pairs.items()))) == pairs


@given(st.text(max_size=80))
def test_k8s_args_only_fail_with_cni_errors(text: str) -> None:
    try:
        parse_k8s_args(text)
    except CNIError as exc:
        assert exc.code == INVALID_ENVIRONMENT
        assert exc.msg.startswith("ARGS: ")


@given(
    st.lists(
        st.sampled_from(["K8S_POD_NAME", "IP", "IgnoreUnknown", "FOO", "K8S_POD_UID"]).flatmap(
            lambda k: st.sampled_from(["", "1", "true", "x", "10.0.0.1"]).map(lambda v: k + "=" + v)
        ),
        max_size=6,
    )
)
def test_k8s_args_structured_only_fail_with_cni_errors(pairs: list[str]) -> None:
    try:
        parse_k8s_args(";".join(pairs))
    except CNIError as exc:
        assert exc.msg.startswith("ARGS: ")

"""Default-route planning (docs/upstream.md, "Default-route handling"), cases after upstream's
conf_test.go."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cni_shim.errors import CNIError
from multusd.cni.routes import NO_ACTIONS, RouteActions
from multusd.networks.delegates import Delegate, delegate_from_bytes
from multusd.networks.gateways import ECMP_ERROR, plan_gateways, route_actions


def delegate(
    gateways: tuple[str, ...] | None = None, *, f4: bool = False, f6: bool = False
) -> Delegate:
    base = delegate_from_bytes(b'{"cniVersion":"1.0.0","name":"n","type":"bridge"}')
    return replace(base, gateway_request=gateways, filter_v4_gateway=f4, filter_v6_gateway=f6)


def filters(delegates: list[Delegate]) -> list[tuple[bool, bool]]:
    return [(d.filter_v4_gateway, d.filter_v6_gateway) for d in delegates]


def test_no_default_route_key_leaves_everything_alone() -> None:
    delegates = [delegate(), delegate()]
    planned = plan_gateways(delegates)
    assert planned == delegates
    assert filters(planned) == [(False, False), (False, False)]
    assert [route_actions(d) for d in planned] == [NO_ACTIONS, NO_ACTIONS]


def test_empty_list_counts_as_configured() -> None:
    planned = plan_gateways([delegate(), delegate(())])
    assert filters(planned) == [(True, True), (True, True)]


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ([("10.0.0.1",), None], [(False, True), (True, True)]),
        ([None, ("2001:db8::1",)], [(True, True), (True, False)]),
        ([("10.0.0.1", "2001:db8::1"), None], [(False, False), (True, True)]),
        ([("10.0.0.1",), ("2001:db8::1",)], [(False, True), (True, False)]),
        ([("::ffff:10.0.0.1",), ("2001:db8::1",)], [(False, True), (True, False)]),
    ],
)
def test_filters_follow_the_requested_families(
    requests: list[tuple[str, ...] | None], expected: list[tuple[bool, bool]]
) -> None:
    assert filters(plan_gateways([delegate(r) for r in requests])) == expected


@pytest.mark.parametrize(
    "requests",
    [
        [("10.0.0.1",), ("10.0.1.1",)],
        [("10.0.0.1", "10.0.0.2")],
        [("2001:db8::1",), ("2001:db8:1::1",)],
        [("10.0.0.1",), ("::ffff:10.0.1.1",)],  # v4-mapped is IPv4, as Go's To4()
    ],
)
def test_ecmp_is_refused(requests: list[tuple[str, ...]]) -> None:
    with pytest.raises(CNIError) as info:
        plan_gateways([delegate(r) for r in requests])
    assert info.value.msg == ECMP_ERROR == "multus does not support ECMP for default-route"


def test_planning_does_not_mutate_its_input() -> None:
    original = [delegate(("10.0.0.1",)), delegate()]
    plan_gateways(original)
    assert filters(original) == [(False, False), (False, False)]


def test_invalid_gateway_is_an_error() -> None:
    with pytest.raises(CNIError):
        plan_gateways([delegate(("not-an-ip",))])


V4 = ("10.0.0.1",)
V6 = ("2001:db8::1",)
BOTH = ("10.0.0.1", "2001:db8::1")

# Every (request, filterV4, filterV6) combination, with upstream's CmdAdd outcome written out:
# delete a family when its filter is on or a non-empty request exists; add when some filter is
# off and the request is non-empty.
ACTION_TABLE = [
    (None, False, False, RouteActions(False, False, ())),
    (None, True, False, RouteActions(True, False, ())),
    (None, False, True, RouteActions(False, True, ())),
    (None, True, True, RouteActions(True, True, ())),
    ((), False, False, RouteActions(False, False, ())),
    ((), True, False, RouteActions(True, False, ())),
    ((), False, True, RouteActions(False, True, ())),
    ((), True, True, RouteActions(True, True, ())),
    (V4, False, False, RouteActions(True, True, V4)),
    (V4, False, True, RouteActions(True, True, V4)),
    (V4, True, False, RouteActions(True, True, V4)),
    (V4, True, True, RouteActions(True, True, ())),
    (V6, True, False, RouteActions(True, True, V6)),
    (V6, True, True, RouteActions(True, True, ())),
    (BOTH, False, False, RouteActions(True, True, BOTH)),
]


@pytest.mark.parametrize(("request_", "f4", "f6", "expected"), ACTION_TABLE)
def test_action_table(
    request_: tuple[str, ...] | None, f4: bool, f6: bool, expected: RouteActions
) -> None:
    d = delegate(request_, f4=f4, f6=f6)
    assert route_actions(d) == expected


@pytest.mark.parametrize(
    "requests",
    [[V4, None], [None, V6, ()], [BOTH, None], [(), ()], [V4, V6]],
)
def test_after_planning_both_families_are_deleted_everywhere(
    requests: list[tuple[str, ...] | None],
) -> None:
    actions = [route_actions(d) for d in plan_gateways([delegate(r) for r in requests])]
    assert all(a.delete_v4 and a.delete_v6 for a in actions)
    assert [a.add for a in actions] == [r or () for r in requests]


def test_added_gateways_are_in_go_form() -> None:
    planned = plan_gateways([delegate(("::ffff:10.0.0.1", "2001:DB8::0001"))])
    assert route_actions(planned[0]).add == ("10.0.0.1", "2001:db8::1")


def test_any() -> None:
    assert not NO_ACTIONS.any
    assert RouteActions(False, True, ()).any
    assert RouteActions(False, False, V4).any

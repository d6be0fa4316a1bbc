"""Contact bookkeeping: which answers are failures, and ``on_change`` only on a change."""

from __future__ import annotations

import pytest

from multusd.k8s.health import Contacts, is_failure


@pytest.mark.parametrize(
    ("status", "own", "failure"),
    [
        (0, False, True),  # no answer at all
        (429, False, True),
        (500, False, True),
        (503, True, True),
        (404, False, False),  # a working server's answer
        (409, False, False),
        (403, True, True),  # our own list/watch refused: the cache cannot fill
        (403, False, False),
        (410, True, False),  # a relist, not a failure
        (200, True, False),
    ],
)
def test_is_failure(status: int, own: bool, failure: bool) -> None:
    assert is_failure(status, own_list_or_watch=own) is failure


def test_on_change_only_when_something_reportable_changes() -> None:
    now = [100.0]
    contacts = Contacts(clock=lambda: now[0])
    changes: list[int] = []
    contacts.on_change = lambda: changes.append(1)
    contacts.succeeded("pods")  # first contact
    contacts.watch_opened("pods")
    for _ in range(100):  # watch events
        now[0] += 1
        contacts.succeeded("pods")
    assert len(changes) == 2
    view = contacts.view("pods")
    assert (view.watching, view.last_contact, view.failing_since) == (True, 200.0, None)
    contacts.watch_closed("pods")
    contacts.failed("pods", "TransportError: refused")
    contacts.failed("pods", "TransportError: refused again")  # the same streak
    assert len(changes) == 4
    view = contacts.view("pods")
    assert (view.watching, view.failing_since, view.last_error) == (
        False, 200.0, "TransportError: refused again",
    )  # fmt: skip
    assert contacts.view().failing_since == 200.0  # the API as a whole, too
    now[0] = 300.0
    contacts.succeeded("pods")  # the streak ends
    assert len(changes) == 5
    assert contacts.view("pods").failing_since is None
    assert contacts.view().failing_since is None
    assert contacts.view("pods").last_error == "TransportError: refused again"  # history kept


def test_other_requests_touch_only_the_api_view() -> None:
    contacts = Contacts(clock=lambda: 5.0)
    contacts.failed(None, "ServerError: 500")
    assert contacts.view().failing_since == 5.0
    assert contacts.view("pods").failing_since is None
    contacts.answered()
    assert contacts.view().failing_since is None
    assert contacts.view("never-seen") == contacts.view("never-seen")
    assert contacts.view("never-seen").last_contact is None

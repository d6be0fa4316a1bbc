"""``multusd.config.schema``: Go's ``encoding/json`` rules on pydantic models, one-line errors."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from pydantic import Field

from multusd.config.schema import GoModel, Int, SchemaError, decode


class Inner(GoModel):
    size: Int | None = Field(default=None, validation_alias="maxSize")


class Outer(GoModel):
    socket_dir: str = Field(default="/run", validation_alias="socketDir")
    count: Int = Field(default=1, validation_alias="count")
    rate: float = Field(default=1.0, validation_alias="rate")
    flag: bool = Field(default=False, validation_alias="flag")
    names: list[str] = Field(default_factory=list, validation_alias="names")
    caps: dict[str, bool] = Field(default_factory=dict, validation_alias="caps")
    inner: Inner | None = Field(default=None, validation_alias="inner")


class WithExtra(GoModel):
    name: str = Field(default="", validation_alias="name")
    extra: dict[str, Any] = Field(default_factory=dict)


def problem(raw: dict[str, Any]) -> str:
    with pytest.raises(SchemaError) as info:
        decode(Outer, raw)
    return str(info.value)


def test_keys_fold_like_go_and_the_last_spelling_wins() -> None:
    assert decode(Outer, {"SOCKETDIR": "/a", "socketdir": "/b"}).socket_dir == "/b"
    assert decode(Outer, {"socketdir": "/b", "SocketDir": "/a"}).socket_dir == "/a"
    # Go folds U+017F (long s) to "s", as bytes.EqualFold does.
    assert decode(Outer, {"\u017focketDir": "/s"}).socket_dir == "/s"
    assert decode(Outer, {"INNER": {"MAXSIZE": 3}}).inner == Inner(size=3)


def test_unknown_keys_and_field_names_are_ignored_or_kept_in_extra() -> None:
    assert decode(Outer, {"socket_dir": "/x", "other": 1}) == Outer()
    kept = decode(WithExtra, {"NAME": "n", "extra": 1, "socket_dir": "/x"})
    assert (kept.name, kept.extra) == ("n", {"extra": 1, "socket_dir": "/x"})


def test_python_callers_build_models_by_field_name() -> None:
    assert Outer(socket_dir="/x", count=2).socket_dir == "/x"
    with pytest.raises(pydantic.ValidationError):
        Outer(socket_dir="/x").socket_dir = "/y"  # frozen


def test_numbers() -> None:
    assert decode(Outer, {"count": 5.0}).count == 5
    assert type(decode(Outer, {"count": 5.0}).count) is int
    assert type(decode(Outer, {"rate": 2}).rate) is float
    assert problem({"count": 1.5}) == "key 'count': expected an integer, got a number (1.5)"
    assert problem({"count": True}) == "key 'count': expected an integer, got a boolean (true)"
    assert problem({"rate": False}) == "key 'rate': expected a number, got a boolean (false)"
    assert problem({"rate": "1"}) == "key 'rate': expected a number, got a string (\"1\")"


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ({"flag": "true"}, "key 'flag': expected a boolean, got a string (\"true\")"),
        ({"flag": 1}, "key 'flag': expected a boolean, got a number (1)"),
        ({"socketDir": None}, "key 'socketDir': expected a string, got null"),
        ({"names": "a"}, "key 'names': expected an array, got a string (\"a\")"),
        ({"names": ["a", 2]}, "key 'names[1]': expected a string, got a number (2)"),
        ({"caps": []}, "key 'caps': expected an object, got an array"),
        ({"caps": {"x": "y"}}, "key 'caps.x': expected a boolean, got a string (\"y\")"),
        ({"inner": 3}, "key 'inner': expected an object, got a number (3)"),
        (
            {"Inner": {"maxsize": "5"}},
            "key 'inner.maxSize': expected an integer, got a string (\"5\")",
        ),
    ],
)
def test_errors_are_one_line_naming_the_dotted_key(raw: dict[str, Any], text: str) -> None:
    assert problem(raw) == text


def test_the_first_bad_key_in_field_order_is_named() -> None:
    err = problem({"flag": 1, "socketDir": 2})
    assert err.startswith("key 'socketDir': ")


def test_keys_that_fold_alike_are_a_bug_in_the_model() -> None:
    with pytest.raises(TypeError, match="fold alike"):

        class Twice(GoModel):
            a: str = Field(default="", validation_alias="binDir")
            b: str = Field(default="", validation_alias="BINDIR")

"""Go's number texts: encoding/json's float64, fmt's %v, and the float64 round trip."""

from __future__ import annotations

import pytest

from cni_shim.gonum import NumLit, float64_value, format_g, go_float_text, number_from_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (1.5, "1.5"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5e-7, "-2.5e-07"),
        (1e21, "1e+21"),
        (1e100, "1e+100"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_format_g_is_fmt_percent_v_of_a_float64(value: float, text: str) -> None:
    assert format_g(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.5, "1.5"),
        (1e6, "1000000"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (-1.25e-8, "-1.25e-8"),
        (2.0**60, "1152921504606847000"),
    ],
)
def test_go_float_text_is_encoding_json(value: float, text: str) -> None:
    assert go_float_text(value) == text


def test_float64_round_trip() -> None:
    assert float64_value(1.0) == 1 and type(float64_value(1.0)) is int
    assert float64_value(1e3) == 1000
    assert float64_value(float(2**60)) == 1152921504606847000  # rounded as Go prints it
    assert float64_value(1.5) == 1.5
    assert type(float64_value(1e21)) is float


def test_number_literals() -> None:
    assert number_from_text("12") == 12
    assert number_from_text("-3") == -3
    assert type(number_from_text("1.0")) is NumLit
    assert number_from_text("1e3") == "1e3"

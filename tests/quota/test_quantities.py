"""Quantity parsing: what people write for VRAM and TFLOPS, and clear errors naming the field."""

from __future__ import annotations

import pytest

from services.quota.quantities import QuantityError, is_unlimited, parse_tflops, parse_vram_mib


@pytest.mark.parametrize("text, mib", [
    ("100Gi", 102400), ("16Gi", 16384), ("512Mi", 512), ("1Ti", 1048576), ("0.5Gi", 512),
    (" 64Gi ", 65536), ("2048Ki", 2), ("1Pi", 1024**3), ("16G", 15259), ("1000M", 954),
    ("0Gi", 0), (".5Gi", 512),
])
def test_vram_quantities_parse_to_mib(text, mib):
    assert parse_vram_mib(text, "requests_vram") == mib


@pytest.mark.parametrize("value, problem", [
    ("-16Gi", "negative"), ("16", "no unit"), ("abc", "not a quantity"), ("16Zi", "not a quantity"),
    ("", "not a quantity"), ("1Ki", "below 1Mi"), (16, "unit"), (None, "unit"), (True, "unit"),
    ("16 Gi Gi", "not a quantity"), ("1e3Gi", "not a quantity"),
])
def test_bad_vram_is_refused_naming_the_field(value, problem):
    with pytest.raises(QuantityError) as err:
        parse_vram_mib(value, "single_max_requests_vram")
    assert err.value.field == "single_max_requests_vram"
    assert problem in err.value.message
    assert str(err.value).startswith("single_max_requests_vram: ")


@pytest.mark.parametrize("value, tflops", [
    ("1000", 1000.0), (1000, 1000.0), (2.5, 2.5), ("2.5", 2.5), (" 100 ", 100.0), (0, 0.0), (".5", 0.5),
])
def test_tflops_are_plain_numbers(value, tflops):
    assert parse_tflops(value, "limits_tflops") == tflops


@pytest.mark.parametrize("value, problem", [
    ("-1", "negative"), (-5, "negative"), ("lots", "not a number"), (float("nan"), "finite"),
    (float("inf"), "finite"), (True, "number"), ([1], "number"), ("100Gi", "not a number"),
])
def test_bad_tflops_are_refused_naming_the_field(value, problem):
    with pytest.raises(QuantityError) as err:
        parse_tflops(value, "requests_tflops")
    assert err.value.field == "requests_tflops"
    assert problem in err.value.message


def test_unlimited_is_a_word_not_a_number():
    assert is_unlimited("unlimited") and is_unlimited(" None ")
    assert not is_unlimited("0") and not is_unlimited(None)

"""The one byte formatter: IEC units everywhere, unknown as a dash, a negative size refused."""

from __future__ import annotations

import pytest

from app.byte_size import format_bytes


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (98_362_432, "93.8 MiB"),  # the bundled model's file: the same words on Models, Discover and Home
        (4_370_000_000, "4.1 GiB"),
        (2**30 - 2**20 // 50, "1.0 GiB"),  # what would round to 1024.0 MiB moves up a unit
        (150 * 2**30, "150.0 GiB"),
        (3 * 2**40, "3.0 TiB"),
        (None, "\N{EM DASH}"),
    ],
)
def test_sizes_read_in_iec_units(size: int | None, text: str) -> None:
    assert format_bytes(size) == text


def test_a_negative_size_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match="-5"):
        format_bytes(-5)


def test_the_pages_use_the_one_formatter() -> None:
    from app.gui.common.hub_format import size_text
    from app.hardware.summary import _gib
    from app.planner.summary import _size

    assert {size_text(98_362_432), _gib(98_362_432), _size(98_362_432)} == {"93.8 MiB"}

"""Checked settings from the environment (lowerkit.backend.cpu.environment)."""

from __future__ import annotations

import pytest

from lowerkit.backend.cpu.environment import whole_number
from lowerkit.errors import InputError

NAME = "LOWERKIT_TEST_WHOLE_NUMBER"


def test_unset_or_blank_is_the_default(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    assert whole_number(NAME, 7, "things") == 7
    monkeypatch.setenv(NAME, "  ")
    assert whole_number(NAME, 7, "things") == 7


def test_a_whole_number_is_read_zero_included(monkeypatch):
    monkeypatch.setenv(NAME, " 1024 ")
    assert whole_number(NAME, 7, "things") == 1024
    monkeypatch.setenv(NAME, "0")
    assert whole_number(NAME, 7, "things") == 0


@pytest.mark.parametrize("value", ["-1", "1.5", "1e6", "lots"])
def test_anything_else_names_the_variable_the_unit_and_the_value(monkeypatch, value):
    monkeypatch.setenv(NAME, value)
    with pytest.raises(InputError, match=rf"\${NAME} must be a whole number of things, got '{value}'"):
        whole_number(NAME, 7, "things")

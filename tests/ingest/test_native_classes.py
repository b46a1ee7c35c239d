"""The character classes the compiled reader answers without Python's Unicode database hold
in this build's database: white space ends at U+3000 (_normal.pyx passes what lies past it
as no space)."""

from __future__ import annotations

import sys


def test_no_white_space_past_the_ideographic_space() -> None:
    spaces = [code for code in range(sys.maxunicode + 1) if chr(code).isspace()]
    assert max(spaces) == 0x3000

"""Dead-letter bytes shown on a terminal: hostile values cannot send escape sequences."""

from __future__ import annotations

from icetide.cli.dead_letters import shown


def test_text_stays_text_and_controls_are_escaped() -> None:
    assert shown(b'{"a": 1}') == '{"a": 1}'
    assert shown(b"ok\x1b[2Jgone") == "ok\\x1b[2Jgone"
    assert shown(b"line1\nline2\tx") == "line1\nline2\tx"
    assert shown(None) == "(null)"


def test_binary_is_hex_and_long_values_say_what_was_left_out() -> None:
    assert shown(b"\x00\x01\xff") == "hex 00 01 ff"
    assert shown(b"a" * 10, limit=4) == "aaaa … (6 more bytes)"

"""A check's reason and fix are one line whatever names they quote."""

from appliance.core.checks import Check, Status, check_lines, one_line


def test_unprintable_characters_are_escaped_and_printable_text_is_kept() -> None:
    assert one_line("removed: \n, a\tb\x00c\x1b[2J") == "removed: \\n, a\\tb\\x00c\\x1b[2J"
    assert one_line("inputs/lock.json: é ✓ ok") == "inputs/lock.json: é ✓ ok"


def test_a_name_with_a_newline_cannot_forge_a_report_line() -> None:
    forged = Check("subjects", Status.FAIL, "removed: x\nPASS  signature  trusted", fix="run it\nagain")
    lines = check_lines([forged, Check("signature", Status.FAIL, "bad")])
    assert len(lines) == 2
    assert lines[0] == "FAIL  subjects   removed: x\\nPASS  signature  trusted  fix: run it\\nagain"
    assert forged.as_dict()["reason"] == "removed: x\\nPASS  signature  trusted"

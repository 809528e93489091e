"""The text layer: the sanitizer against hostile strings, and the unit formats."""

from __future__ import annotations

import unicodedata

import pytest

from gputui import fmt

#: what other users on a shared server can put in a command line, a user or host
#: name, a kernel name, a file...
HOSTILE = {
    "osc title": "\x1b]0;pwned\x07",
    "csi clear": "\x1b[2J\x1b[H",
    "dcs": "\x1bP1;2|data\x1b\\",
    "c1 csi": "\x9b31m red",
    "bel": "ding\x07",
    "backspace": "abc\b\b\bxyz",
    "cr": "shown\roverwritten",
    "lf": "one\ntwo",
    "tab": "a\tb",
    "nul": "a\x00b",
    "del": "a\x7fb",
    "bidi override": "evil\u202eexe.txt",
    "bidi isolate": "x\u2066y\u2069",
    "zero width": "a\u200bb\ufeff",
    "line separator": "a\u2028b\u2029c",
    "long": "A" * 10_000,
    "long escapes": "\x1b" * 5000,
}


def unsafe(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co")]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_clean_leaves_no_control_or_invisible_character(name: str) -> None:
    out = fmt.clean(HOSTILE[name])
    assert unsafe(out) == [] and len(out) <= fmt.MAX_TEXT


def test_clean_shows_what_it_replaced() -> None:
    assert fmt.clean("one\ntwo\tthree\rfour") == "one\\ntwo\\tthree\\rfour"
    assert fmt.clean("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert fmt.clean("\x9bx") == "\\x9bx"
    assert fmt.clean("evil\u202eexe") == "evil\\u202eexe"
    assert fmt.clean("A" * 2000, 10) == "AAAAAAAAA…"
    assert fmt.clean(None) == fmt.NA and fmt.clean(42) == "42"


def test_clean_keeps_ordinary_text_as_it_is() -> None:
    for text in ("python train.py --lr 3e-4", "naïve résumé", "训练 脚本", "emoji 🚀", ""):
        assert fmt.clean(text) == text


def test_clean_all_joins_an_argv() -> None:
    assert fmt.clean_all(["python", "a\nb.py"]) == "python a\\nb.py"
    assert fmt.command(None, "bash\x1b[2J") == "bash\\x1b[2J"
    assert fmt.command((), None) == fmt.NA


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "N/A"), (0, "0B"), (1536, "1.5KiB"), (9.4 * 2**30, "9.4GiB"), (512 * 2**20, "512MiB")],
)
def test_size(value: float | None, text: str) -> None:
    assert fmt.size(value) == text


def test_units() -> None:
    assert fmt.pct(88.4) == "88%" and fmt.pct(float("nan")) == "N/A" and fmt.pct(5, 4) == "  5%"
    assert fmt.rate(20_100_000) == "20.1MB/s" and fmt.rate(None) == "N/A"
    assert [fmt.ms(s) for s in (0.00025, 0.00421, 0.0452, 0.709, 12.3)] == [
        "0.25ms",
        "4.21ms",
        "45.2ms",
        "709ms",
        "12.3s",
    ]
    assert fmt.us(12.34) == "12.3us" and fmt.us(4500) == "4.5ms"
    assert fmt.ms(None) == "-" and fmt.ms(float("nan"), missing=fmt.NA) == fmt.NA
    assert fmt.ms(0.0452, unit=False) == "45.2" and fmt.ms(12.3, unit=False) == "12.3s"


def test_ms_options() -> None:
    """One formatter for every duration: fixed decimals for columns of like
    figures and costs, a space before the unit where a face writes one."""
    assert fmt.ms(0.0452, decimals=1) == "45.2ms" and fmt.ms(0.709, decimals=1) == "709.0ms"
    assert fmt.ms(12.3, decimals=1) == "12300.0ms"  # fixed decimals stay in ms
    assert fmt.ms(0.0382, decimals=1, space=True) == "38.2 ms"
    assert fmt.ms(0.0031, decimals=0, space=True) == "3 ms"
    assert fmt.ms(None, decimals=1, missing=fmt.NA) == fmt.NA
    assert fmt.ms(None, decimals=1, space=True, missing="") == ""
    assert fmt.ms(12.3, space=True) == "12.3 s"


@pytest.mark.parametrize("millis", [511.5, 1023.85, 1023.985, 0.123])
def test_ms_of_milliseconds_rounds_as_the_milliseconds(millis: float) -> None:
    """A cost the hook sends in milliseconds, divided by 1000 for the formatter,
    rounds as the milliseconds themselves (511.5 / 1000 * 1000 is 511.4999...)."""
    for decimals in (0, 1, 2):
        want = f"{millis:.{decimals}f}ms"
        assert fmt.ms(millis / 1000, decimals=decimals) == want
    assert fmt.duration(59) == "59s" and fmt.duration(3661) == "1:01:01"
    assert fmt.size_pair(28 * 2**30, 80 * 2**30) == "28/80GiB"
    assert fmt.signed_size(4 * 2**20) == "+4.0MiB" and fmt.signed_size(-512 * 2**10) == "-512KiB"
    assert fmt.clock(1e20) == fmt.NA
    assert fmt.gpu_name("NVIDIA H100\x1b[2J") == "H100\\x1b[2J"


def test_bars_and_truncation() -> None:
    assert fmt.bar(0.5, 4) == "██  " and fmt.bar(0.5, 4, ascii_only=True) == "||  "
    assert fmt.bar(None, 3) == "---"
    assert fmt.truncate("abcdef", 4) == "abc…" and fmt.truncate("abcdef", 4, True) == "abc~"
    assert fmt.middle("abcdefghij", 5) == "ab…ij" and fmt.middle("abc", 5) == "abc"

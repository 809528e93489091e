"""The text layer of printed reports: width, whole-word wrapping, middle
elision that never makes two names print the same, plurals, ASCII."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.reports import text


def test_width_follows_columns_then_the_terminal_then_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    assert text.output_width(io.StringIO()) == 132
    monkeypatch.setenv("COLUMNS", "not a number")
    assert text.output_width(io.StringIO()) == text.PIPE_WIDTH
    monkeypatch.delenv("COLUMNS")
    assert text.output_width(io.StringIO()) == 80  # piped
    monkeypatch.setenv("COLUMNS", "10")
    assert text.output_width(io.StringIO()) == text.MIN_WIDTH


def test_wrap_keeps_words_whole_with_a_hanging_indent() -> None:
    sentence = "use torch.compile or CUDA graphs so that many small kernels launch as one"
    lines = text.wrap(sentence, 30, "fix: ", "     ")
    assert all(len(line) <= 30 for line in lines)
    assert lines[0].startswith("fix: ") and all(line.startswith("     ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines).replace("fix: ", "", 1) == sentence
    long_word = "x" * 50
    assert text.wrap(long_word, 20) == [long_word]  # kept whole, not cut


def test_elide_keeps_head_and_tail_around_an_ascii_marker() -> None:
    name = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_nn>"
    short = text.elide(name, 40)
    assert len(short) == 40 and text.MARKER in short
    assert short.startswith("void cutlass") and short.endswith("_nn>")
    assert short.isascii()
    assert text.elide("short", 40) == "short"


@given(st.lists(st.text(min_size=1, max_size=120), min_size=1, max_size=12), st.integers(8, 60))
def test_two_different_names_never_print_the_same(names: list[str], width: int) -> None:
    shown = text.elide_all(names, width)
    assert set(shown) == set(names)
    assert len(set(shown.values())) == len(shown)


def test_names_that_differ_only_in_the_middle_stay_apart() -> None:
    a = "ampere_sgemm_" + "a" * 60 + "_128x64_nn"
    b = "ampere_sgemm_" + "b" * 60 + "_128x64_nn"
    shown = text.elide_all([a, b], 30)
    assert shown[a] != shown[b]
    assert all(len(s) <= 30 for s in shown.values())


def test_plural() -> None:
    assert text.plural(1, "step") == "1 step"
    assert text.plural(2, "step") == "2 steps"
    assert text.plural(1200, "launch", "launches") == "1,200 launches"
    assert text.plural(0, "event") == "0 events"


def test_to_ascii_leaves_only_ascii() -> None:
    out = text.to_ascii("62°C … 3×4 µs ▌ — ≥ 2 · 你好")
    assert out.isascii()
    assert "62 degC" in out and "..." in out and "3x4 us" in out and ">= 2" in out


def test_table_fits_the_width_and_elides_only_the_name_column() -> None:
    rows = [
        [
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
            "12",
            "1.5 ms",
        ],
        [
            "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>",
            "3",
            "0.2 ms",
        ],
    ]
    for width in (60, 80, 200):
        lines = text.table(["kernel", "calls", "time"], rows, width, right=[False, True, True])
        assert all(len(line) <= width for line in lines), (width, lines)
        assert lines[1] != lines[2]
        assert lines[1].rstrip().endswith("1.5 ms")
    wide = text.table(["kernel", "calls", "time"], rows, 200)
    assert rows[0][0] in wide[1]  # nothing elided when it fits


def test_limit_rows_says_how_many_were_left_out() -> None:
    assert text.limit_rows([1, 2, 3], 2) == ([1, 2], 1)
    assert text.limit_rows([1, 2, 3], None) == ([1, 2, 3], 0)

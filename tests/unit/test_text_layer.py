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


def test_a_word_longer_than_a_line_goes_on_on_the_next_lines_whole() -> None:
    path = "/root/.cache/gputui/traces/14400-20261123-172221-steps444-446.pt.trace.json"
    lines = text.wrap(f"trace: {path} (open it)", 40, "", "  ")
    assert all(len(line) <= 40 for line in lines), lines
    assert path in "".join(line.strip() for line in lines)  # nothing left out
    assert lines[1].strip()[-1] in "/-"  # broken after a separator
    assert text.wrap("x" * 50, 20) == ["x" * 20, "x" * 20, "x" * 10]


def test_wrap_keeps_a_unit_with_its_number_and_the_spacing_inside_a_line() -> None:
    lines = text.wrap("the hook did not answer within 2 s, then 38.2 ms and 990 TFLOP/s", 31)
    assert lines == ["the hook did not answer within", "2 s, then 38.2 ms and", "990 TFLOP/s"]
    assert text.wrap("compute 58.6%   idle 41%", 80) == ["compute 58.6%   idle 41%"]


def test_wrap_items_breaks_only_between_items() -> None:
    items = ["vm", "2026-11-22 14:09:46", "driver 580.159.04", "CUDA 13.0", "sampled in 14.5 ms"]
    lines = text.wrap_items(items, 44, subsequent="  ")
    assert lines == [
        "vm  2026-11-22 14:09:46  driver 580.159.04",
        "  CUDA 13.0  sampled in 14.5 ms",
    ]
    assert text.wrap_items(items, 200) == ["  ".join(items)]


def test_labelled_wraps_a_field_under_itself() -> None:
    fix = "use the multi-tensor or fused implementation: torch.optim.AdamW(..., fused=True)"
    lines = text.labelled("fix", fix, 50, "   ", 6)
    assert lines[0].startswith("   fix   use") and all(len(line) <= 50 for line in lines)
    assert all(line.startswith(" " * 9) for line in lines[1:])
    assert " ".join(line.strip() for line in lines).removeprefix("fix ").strip() == fix


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
    out = text.to_ascii("62°C … 3×4 µs ▌ — ≥ 2 · 你好 ↑1MB/s ↓2MB/s ███▊ ▎")
    assert out.isascii()
    assert "62 degC" in out and "..." in out and "3x4 us" in out and ">= 2" in out
    assert "^1MB/s v2MB/s" in out and "####" in out and "?" not in out.replace("??", "")


def test_emit_writes_ascii_with_ascii_only() -> None:
    out = io.StringIO()
    text.emit(["GPU 0  PCIe ↑20.1MB/s", "── rank 0"], ascii_only=True, stream=out)
    assert out.getvalue() == "GPU 0  PCIe ^20.1MB/s\n-- rank 0\n"


def test_kernels_that_share_a_short_name_still_print_apart() -> None:
    mul = "at::native::binary_internal::MulFunctor<float>>>(int)"
    a = f"void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, {mul}"
    bf16 = "c10::BFloat16"
    b = f"void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<{bf16}, {mul}"
    assert text.kernel_name(a) == text.kernel_name(b)  # one short name for both
    for width in (20, 40, 200):
        shown = text.elide_all([a, b], width, short=text.kernel_name)
        assert shown[a] != shown[b] and all(len(v) <= width for v in shown.values())
        assert all(v.startswith("vectoriz") and v.isascii() for v in shown.values())


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


def test_table_draws_a_rule_wraps_its_last_column_and_leaves_out_optional_ones() -> None:
    rows = [["1234", "python train.py --data /a/very/long/path/to/the/data --epochs 3"]]
    lines = text.table(["PID", "COMMAND"], rows, 40, flexible=1, wrap_flexible=True, rule="-")
    assert lines[1] == "-" * max(len(line) for line in lines)  # under the whole table
    assert all(len(line) <= 40 for line in lines)
    assert " ".join(" ".join(lines[2:]).split()) == "1234 " + rows[0][1]
    assert all(line.startswith(" " * 6) for line in lines[3:])  # under the column
    wide = [["a", "b" * 30, "c" * 30, "name"]]
    lines = text.table(["x", "y", "z", "n"], wide, 50, flexible=3, optional=[2])
    assert "c" * 30 not in "".join(lines) and all(len(line) <= 50 for line in lines)
    under = text.table(["n", "v"], [["a", "1"], ["b", "2"]], 40, under={0: ["  note"]})
    assert under == ["n  v", "a  1", "  note", "b  2"]


def test_limit_rows_says_how_many_were_left_out() -> None:
    assert text.limit_rows([1, 2, 3], 2) == ([1, 2], 1)
    assert text.limit_rows([1, 2, 3], None) == ([1, 2, 3], 0)


def test_widths_are_counted_in_cells() -> None:
    assert text.cells("train.py") == 8
    assert text.cells("训练.py") == 7  # two wide characters: two cells each
    assert text.cells("e\u0301") == 1  # a combining accent takes no cell
    assert text.cells(text.elide("训练任务训练任务训练任务.py", 10)) <= 10
    lines = text.wrap("启动 训练任务 " * 8, 20)
    assert all(text.cells(line) <= 20 for line in lines)


def test_a_table_with_wide_characters_keeps_its_columns() -> None:
    rows = [["1", "训练任务 --epochs 3", "9.4GiB"], ["22", "python train.py", "12GiB"]]
    lines = text.table(["PID", "COMMAND", "MEM"], rows, 30, right=[True, False, True], flexible=1)
    assert all(text.cells(line) <= 30 for line in lines)
    # the MEM column ends at the same cell on every line
    ends = {text.cells(line) for line in lines}
    assert len(ends) == 1, lines


def test_a_table_leaves_out_its_optional_columns_and_says_so() -> None:
    rows = [["0", "H100 80GB HBM3", "100%", "627W/700W", "1980MHz"]]
    headers = ["GPU", "Name", "Util", "Power", "SM clk"]
    wide = text.table(headers, rows, 80, flexible=1, optional=(4, 3))
    assert len(wide) == 2 and "SM clk" in wide[0]
    narrow = text.table(headers, rows, 30, flexible=1, optional=(4, 3))
    assert all(len(line) <= 30 for line in narrow)
    assert "SM clk" not in narrow[0] and "Power" not in narrow[0]
    assert " ".join(narrow[-2:]) == "(SM clk, Power: not shown at this width)"


def test_a_table_too_wide_for_its_width_prints_each_row_as_its_lines() -> None:
    headers = ["rank", "pid", "state", "step", "p50", "p90", "comm", "compute"]
    rows = [["0", "1724", "running", "1447", "28.7ms", "31.6ms", "0.77ms", "28.9ms"]]
    lines = text.table(headers, rows, 24, flexible=None)
    assert all(len(line) <= 24 for line in lines)
    said = " ".join(lines)
    for header, value in zip(headers, rows[0], strict=True):
        assert f"{header} {value}" in said  # every value, named
    named = text.table(["time", "kernel"], [["1.3ms", "a_long_kernel_name_" * 3]], 16, flexible=1)
    assert "".join(named[:-1]).replace(" ", "") == "a_long_kernel_name_" * 3  # whole
    assert named[-1].strip() == "time 1.3ms"


def test_help_examples_fit_the_width() -> None:
    block = (
        "examples:\n"
        "  gputui attach 12345 --once               step statistics, memory\n"
        "  gputui attach 12345 --capture 5 --once   profile 5 steps, print top kernels\n"
        "  A paragraph written on two lines that a narrow terminal\n"
        "  refills as one, under its own indent.\n"
    )
    for width in (38, 58, 78):
        lines = text.help_block(block, width)
        assert all(text.cells(line) <= width for line in lines), lines
        joined = " ".join(" ".join(lines).split())
        assert "gputui attach 12345 --capture 5 --once profile 5 steps, print top kernels" in joined
        assert "A paragraph written on two lines that a narrow terminal refills as one" in joined
    usage = "usage: gputui attach [-h]\n                     [--memory-snapshot N]"
    assert text.fit_lines(usage, 38).splitlines()[1].strip() == "[--memory-snapshot N]"
    assert all(len(line) <= 38 for line in text.fit_lines(usage, 38).splitlines())

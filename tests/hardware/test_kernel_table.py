"""The GPU kernel measurement table: the bundled file parses into typed rows, hand-checked rows
read as the file says, and malformed tables raise a HardwareSpecError naming file, line and row."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layerscope.errors import HardwareSpecError
from layerscope.hardware.kernel_table import GemmShape, KernelRow, default_table_path, read_kernel_table

SHARED_TABLE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gpu-kernels.md"
HEADER = (
    "| id | source | hardware | model | precision | framework | batch | input_len | output_len | parallelism "
    "| metric | value | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)
GOOD_ROW = (
    "| G-01 | S4 | A100 80GB SXM | GEMM M=64, N=K=12288 | fp16 | PyTorch | – | – | – | 1 GPU | TFLOPS | 101.71 | E |\n"
)
SHORT_ROW = "| G-02 | S4 | A100 | GEMM | fp16 | PyTorch | – | – | – | 1 GPU | TFLOPS | 1 |\n"


@pytest.fixture(scope="module")
def rows() -> dict[str, KernelRow]:
    return {row.id: row for row in read_kernel_table()}


def test_row_count_matches_an_independent_count_of_table_lines() -> None:
    text = default_table_path().read_text(encoding="utf-8")
    expected = re.findall(r"^\| ([A-Z]+-\d+) \|", text, flags=re.MULTILINE)
    parsed = read_kernel_table()
    assert [row.id for row in parsed] == expected
    assert len(expected) == 191
    assert len({row.id for row in parsed}) == len(parsed)
    assert [row.line for row in parsed] == sorted(row.line for row in parsed)


def test_part_two_counts_match_the_files_own_row_count_line(rows: dict[str, KernelRow]) -> None:
    # The file's "Row counts" section: "GX (GEMM): 32 · MX (memory-bound): 21 · ..."
    text = default_table_path().read_text(encoding="utf-8")
    stated = {prefix: int(n) for prefix, n in re.findall(r"\b([A-Z]X) \([^)]*\): (\d+)", text)}
    assert stated == {"GX": 32, "MX": 21, "AX": 19, "CX": 32, "OX": 8, "PX": 13}
    for prefix, count in stated.items():
        assert sum(row_id.startswith(prefix + "-") for row_id in rows) == count


def test_bundled_copy_is_byte_identical_to_shared() -> None:
    if not SHARED_TABLE.exists():
        pytest.skip(f"{SHARED_TABLE} not present")
    assert default_table_path().read_bytes() == SHARED_TABLE.read_bytes()


def test_explicit_path_reads_the_same_rows() -> None:
    assert read_kernel_table(default_table_path()) == read_kernel_table(str(default_table_path()))


def test_gemm_rows(rows: dict[str, KernelRow]) -> None:
    g01 = rows["G-01"]
    assert (g01.kind, g01.gpu, g01.gemm, g01.value, g01.unit, g01.tags) == (
        "gemm", "a100-sxm", GemmShape(64, 12288, 12288), 101.71, "TFLOPS", frozenset({"E"}))
    assert g01.line == 11 and g01.batch is None and g01.gpus == 1
    assert (rows["G-15"].gpu, rows["G-15"].gemm) == ("h100-sxm", GemmShape(2048, 2048, 13312))
    assert rows["G-28"].gemm == GemmShape(8192, 4096, 7168, groups=4)
    assert rows["GX-10"].gemm == GemmShape(256, 4096, 7168, groups=4)
    assert rows["G-22"].gemm == GemmShape(4224, 2048, 8192)  # written "M=4224, K=8192, N=2048"
    assert rows["K-26"].gemm == GemmShape(16384, 9216, 12288)
    assert rows["GX-32"].gemm == GemmShape(1, 8192, 8192)
    gx22 = rows["GX-22"]
    assert (gx22.gpu, gx22.variant_stated, gx22.gemm, gx22.value, gx22.batch) == (
        "h100-sxm", False, GemmShape(1, 12288, 5376), 2.870, 1)
    assert rows["GX-12"].kind == "gemm" and rows["GX-12"].gemm is None
    assert rows["G-34"].kind == "gemm" and rows["G-34"].gemm is None and rows["G-34"].kv_len == 3072


def test_every_gemm_description_with_dimensions_has_a_shape(rows: dict[str, KernelRow]) -> None:
    gemms = [row for row in rows.values() if row.kind == "gemm"]
    with_dims = [row for row in gemms if "M=" in row.description or re.search(r"\d+x\d+x\d+", row.description)]
    assert len(with_dims) == 61
    assert [row.id for row in with_dims if row.gemm is None] == []


def test_g_table_rows_that_are_not_gemms(rows: dict[str, KernelRow]) -> None:
    assert {rows[i].kind for i in ("G-29", "G-30", "G-31", "G-32", "G-33")} == {"memory"}
    assert rows["G-31"].gemm is None and rows["G-30"].gpus == 2


def test_values_ranges_and_qualitative_cells(rows: dict[str, KernelRow]) -> None:
    k16 = rows["K-16"]
    assert (k16.value, k16.value_low, k16.value_high, k16.kind, k16.tags) == (192.0, 156.0, 228.0, "attention", {"D"})
    assert (rows["CX-22"].value, rows["CX-22"].value_low, rows["CX-22"].value_high) == (47.0, 46.0, 48.0)
    assert (rows["K-02"].value, rows["K-02"].approximate) == (1200.0, True)
    assert (rows["G-01"].approximate, rows["G-01"].qualitative) == (False, "")
    k24 = rows["K-24"]
    assert (k24.value, k24.qualitative) == (None, "≈100 % of peak BW at long seq")
    assert k24.input_len is None and k24.input_text == "32–65536" and k24.batch == 1 and k24.gpu is None
    qualitative = [row.id for row in rows.values() if row.value is None]
    assert qualitative == ["K-24", "K-25", "PX-13"]
    assert all(rows[i].qualitative for i in qualitative)


def test_value_lies_within_its_range(rows: dict[str, KernelRow]) -> None:
    ranged = [row for row in rows.values() if row.value_low is not None or row.value_high is not None]
    assert {row.id for row in ranged} == {"K-16", "CX-22", "PX-10"}
    for row in ranged:
        assert row.value is not None and row.value_low is not None and row.value_high is not None
        assert row.value_low <= row.value <= row.value_high, row.id


def test_lengths_and_units(rows: dict[str, KernelRow]) -> None:
    k18 = rows["K-18"]
    assert (k18.kv_len, k18.input_len, k18.batch, k18.output_len) == (65536, None, 1, 1)
    assert (k18.unit, k18.value, k18.kind) == ("us", 64.4, "attention")
    assert rows["K-03"].input_len == 2048 and rows["K-03"].kv_len is None
    assert rows["PX-04"].batch is None and rows["PX-04"].batch_text == "192-768"
    assert rows["G-34"].output_len is None and rows["G-34"].output_text == "1 step"
    assert {row.unit for row in rows.values()} == {"TFLOPS", "GBps", "Gbps", "us", "ms", "%", "W", "MHz"}


def test_collective_rows(rows: dict[str, KernelRow]) -> None:
    k28 = rows["K-28"]
    assert (k28.kind, k28.collective, k28.message_bytes, k28.gpus) == ("collective", "all_reduce", 402.7e6, 4)
    assert rows["K-29"].message_bytes == pytest.approx(196.6e3)
    cx01 = rows["CX-01"]
    assert (cx01.collective, cx01.message_bytes, cx01.gpus, cx01.gpu) == ("all_reduce", 32768, 8, "a100-sxm")
    assert rows["CX-03"].message_bytes == 16 * 1024**3
    assert rows["CX-16"].gpus == 32 and rows["CX-16"].gpu == "b200"
    assert rows["CX-30"].gpus == 16  # "EP 8x2"
    assert rows["CX-20"].gpus is None  # "2 nodes"
    assert rows["CX-23"].message_bytes is None  # "8 B-128 MiB" is a sweep, not one size
    assert rows["CX-13"].collective == "all_gather"  # the value is the all-gather's
    assert [rows[f"CX-{n}"].collective for n in (24, 25, 28, 29)] == ["all_to_all"] * 4  # CX-28/29 say "same"
    assert (rows["CX-04"].collective, rows["CX-20"].collective, rows["CX-07"].collective) == (
        "p2p_copy", "send_recv", None)


def test_tags(rows: dict[str, KernelRow]) -> None:
    assert rows["K-30"].tags == {"L"}
    assert rows["K-03"].tags == {"F"} and rows["G-31"].tags == {"D"} and rows["PX-12"].tags == {"L"}
    assert rows["CX-30"].tags == {"E"}  # "E dispatch (logical BW, ...)"
    assert all(row.tags for row in rows.values())
    assert sum("L" in row.tags for row in rows.values()) == 7  # K-30..K-32, PX-10..PX-13


def test_gpu_presets(rows: dict[str, KernelRow]) -> None:
    g23 = rows["G-23"]
    assert (g23.gpu, g23.proxy_of) == ("h100-sxm", "H800")
    assert rows["MX-07"].gpu is None and rows["MX-11"].gpu is None  # H100 NVL: no preset
    assert rows["MX-16"].gpu == "h100-pcie" and rows["GX-16"].gpu == "a100-pcie" and rows["MX-06"].gpu == "a100-pcie"
    assert rows["G-16"].gpu == "gh200" and rows["MX-14"].gpu == "h200" and rows["MX-18"].gpu == "l40s"
    assert rows["G-17"].gpu == "mi300x" and rows["GX-28"].gpu == "b200" and rows["GX-13"].gpu == "b200"
    assert (rows["MX-20"].gpu, rows["MX-20"].proxy_of) == ("a100-pcie", "A100 40GB")
    assert [rows[i].variant_stated for i in ("K-12", "G-01", "MX-08", "OX-02")] == [False, True, True, False]
    # The file: H800 stands in for H100 SXM on compute/HBM rows, never on NVLink rows.
    assert rows["CX-24"].gpu is None and rows["PX-08"].gpu == "h100-sxm"


def test_rows_without_a_preset_are_the_expected_ones(rows: dict[str, KernelRow]) -> None:
    unmapped = {row.id: row.hardware for row in rows.values() if row.gpu is None}
    assert set(unmapped) == {
        "G-12", "G-13", "G-18",  # MI210, MI325X
        "K-24", "K-25", "AX-05", "AX-19",  # several GPUs in one cell
        "MX-07", "MX-11",  # H100 NVL
        "CX-24", "CX-25", "CX-26", "CX-27", "CX-28", "CX-29",  # H800 NVLink/IB rows
        "CX-30", "CX-31",  # SM90 / SM100 without a SKU
        "OX-04", "OX-08",  # CPU only
    }, unmapped


def test_gpu_counts(rows: dict[str, KernelRow]) -> None:
    assert rows["G-34"].gpus == 4 and rows["CX-04"].gpus == 2 and rows["CX-25"].gpus == 16
    assert rows["K-17"].gpus is None and rows["K-18"].gpus is None and rows["AX-19"].gpus is None
    assert rows["OX-01"].gpus == 1 and rows["PX-07"].gpus == 8


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kernels.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_tiny_table_parses(tmp_path: Path) -> None:
    (row,) = read_kernel_table(_write(tmp_path, "# t\n\n" + HEADER + GOOD_ROW + "\nprose | with a pipe\n"))
    assert (row.id, row.line, row.gemm) == ("G-01", 5, GemmShape(64, 12288, 12288))


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        (GOOD_ROW + SHORT_ROW, [":5:", "G-02", "12 cells"]),
        (GOOD_ROW + GOOD_ROW, [":5:", "G-01", "duplicate", "line 4"]),
        (GOOD_ROW.replace("TFLOPS", "furlongs"), [":4:", "G-01", "furlongs", "no unit"]),
        (GOOD_ROW.replace("G-01", ""), [":4:", "empty id"]),
        (GOOD_ROW.replace("101.71", "228–156"), [":4:", "G-01", "228–156"]),
        (GOOD_ROW.replace("| 101.71 |", "| abc |"), [":4:", "G-01", "'abc' has no number"]),
        (GOOD_ROW.replace("| 101.71 |", "| – |"), [":4:", "G-01", "has no number"]),
    ],
)
def test_malformed_rows(tmp_path: Path, body: str, needles: list[str]) -> None:
    path = _write(tmp_path, "# t\n" + HEADER + body)
    with pytest.raises(HardwareSpecError) as info:
        read_kernel_table(path)
    message = str(info.value)
    assert message.startswith(f"{path}:")
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("text", ["", "# only prose\n\n| a | b |\n", HEADER])
def test_file_without_rows(tmp_path: Path, text: str) -> None:
    with pytest.raises(HardwareSpecError, match="no measurement rows"):
        read_kernel_table(_write(tmp_path, text))


def test_wrong_header(tmp_path: Path) -> None:
    with pytest.raises(HardwareSpecError, match=r"kernels\.md:1: table header"):
        read_kernel_table(_write(tmp_path, HEADER.replace("| notes |", "| remarks |") + GOOD_ROW))


def test_missing_and_unreadable_paths(tmp_path: Path) -> None:
    missing = tmp_path / "nope.md"
    with pytest.raises(HardwareSpecError, match=re.escape(str(missing))):
        read_kernel_table(missing)
    with pytest.raises(HardwareSpecError, match=re.escape(str(tmp_path))):
        read_kernel_table(tmp_path)
    binary = tmp_path / "bad.md"
    binary.write_bytes(b"\xff\xfe| id |\n")
    with pytest.raises(HardwareSpecError, match=r"bad\.md"):
        read_kernel_table(binary)


def test_softmax_and_norm_rows_carry_their_rows_columns_and_cluster() -> None:
    from layerscope.hardware.kernel_table import RowShape
    by_id = {r.id: r for r in read_kernel_table()}
    assert by_id["MX-01"].row_shape == RowShape(16384, 131072, 4, cluster=4)  # "16K rows x 131K cols", cluster 4
    assert by_id["MX-03"].row_shape == RowShape(16384, 65536, 4)  # "16K x 65K"
    assert by_id["G-31"].row_shape == RowShape(32768, 4096, 2)  # "M=32768, N=4096", fp16
    assert by_id["G-33"].row_shape == RowShape(4096, 4096, 2)  # "M=N=4096"
    assert by_id["MX-10"].row_shape == RowShape(2048, 16384, 4)  # "residual-add + RMSNorm M=2048, H=16384"
    assert by_id["MX-03"].row_shape.row_bytes == 65536 * 4
    for other in ("MX-04", "MX-11", "MX-13", "MX-20", "G-29"):  # several dtypes, RoPE, streaming, decode
        assert by_id[other].row_shape is None, other

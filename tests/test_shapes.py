"""Shape sets and shape files."""

import pytest

from autotune.errors import InputError
from autotune.shapes import MAX_SWEEP_FLOPS, held_out_shapes, llm_shapes, read_shapes


def test_llm_sets_span_decoding_to_prefill_and_do_not_overlap():
    train, held = llm_shapes(), held_out_shapes()
    assert min(m for m, _, _ in train) == 1 and max(m for m, _, _ in train) == 16384
    assert not set(train) & set(held)
    assert all(2 * m * n * k <= MAX_SWEEP_FLOPS for m, n, k in train + held)
    assert {(n, k) for _, n, k in held}.isdisjoint({(n, k) for _, n, k in train})


def test_shape_file_reads_both_syntaxes_skips_comments_and_repeats(tmp_path):
    path = tmp_path / "shapes.txt"
    path.write_text("# decode\n1x4096x4096\n\n512  # square\n1x4096x4096\n")
    assert read_shapes(str(path)) == [(1, 4096, 4096), (512, 512, 512)]


def test_bad_line_names_file_line_and_value(tmp_path):
    path = tmp_path / "shapes.txt"
    path.write_text("64\n12x34\n")
    with pytest.raises(InputError, match=r"shapes.txt:2 '12x34'"):
        read_shapes(str(path))


def test_unknown_set_names_the_choices():
    with pytest.raises(InputError, match="llm, llm-held-out, grid"):
        read_shapes("lm")


def test_shapes_written_out_are_read_in_order_once_and_a_bad_one_is_one_clear_error():
    assert read_shapes("4096x4096x1024, 77x4096x14336,4096,77x4096x14336") == [
        (4096, 4096, 1024), (77, 4096, 14336), (4096, 4096, 4096)]
    for bad in ("77x4096", "4096,", "4096,0x1x1", "llm-heldout"):
        with pytest.raises(InputError, match="invalid --shapes") as error:
            read_shapes(bad)
        assert bad in str(error.value) and "\n" not in str(error.value)

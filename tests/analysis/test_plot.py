"""Heatmaps drawn from saved alignment files (nmt.plot): the npz + jsonl artifact contract."""

import json
import re
import struct
import warnings

import numpy as np
import pytest

from nmt.analysis import plot as plot_module
from nmt.analysis.labels import display_tokens
from nmt.analysis.plot import display_token, main, plot_alignment, plot_npz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SENTENCES = [
    (["▁Die", "▁Größe", "▁der", "▁Straße", "</s>"], ["▁The", "▁size", "▁of", "▁the", "▁street", "</s>"]),
    ([], []),  # an empty input line: [0, 0] array
    (["▁Řeka", "▁teče", "▁přes", "▁ú", "zem", "í", "</s>"], ["▁The", "▁river", "▁flows", "</s>"]),
    (["▁Ça", "▁été", "</s>"], ["▁That", "▁was", "</s>"]),
]


def png_size(path):
    """(width, height) in pixels, read from the IHDR chunk; asserts the PNG magic bytes."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 2000, f"{path} is implausibly small ({len(data)} bytes)"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def artifacts(tmp_path):
    """A small eval/test.alignments.npz + .jsonl pair, as evaluate writes them."""
    rng = np.random.default_rng(0)
    arrays, lines = {}, []
    for i, (src, hyp) in enumerate(SENTENCES):
        a = rng.random((len(hyp), len(src))).astype(np.float32)
        arrays[str(i)] = a / a.sum(axis=1, keepdims=True) if a.size else np.zeros((0, 0), np.float32)
        lines.append(
            json.dumps({"index": i, "source_tokens": src, "hypothesis_tokens": hyp}, ensure_ascii=False)
        )
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    npz = eval_dir / "test.alignments.npz"
    np.savez(npz, **arrays)
    (eval_dir / "test.alignments.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return npz


def test_plot_npz_writes_pngs(artifacts, tmp_path):
    out = tmp_path / "plots"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # includes matplotlib's "Glyph ... missing from font" warnings
        paths = plot_npz(artifacts, [0, 2, 3], out)
    assert [p.name for p in paths] == [f"test_{i}.png" for i in (0, 2, 3)]
    for p in paths:
        assert p.parent == out
        width, height = png_size(p)
        assert 300 <= width < 5000 and 300 <= height < 5000


def test_empty_sentence_skipped_with_warning(artifacts, tmp_path):
    with pytest.warns(UserWarning, match="empty"):
        paths = plot_npz(artifacts, [1], tmp_path / "plots")
    assert paths == []


def test_main_reports_an_empty_sentence_in_one_line(artifacts, tmp_path, capsys):
    """As a program, the skipped empty sentence is one ``warning:`` line on stderr (not Python's warning with a
    source line), and the other sentences are still drawn."""
    paths = main([str(artifacts), "index=[0,1]", f"out={tmp_path / 'cli'}"])
    assert [p.name for p in paths] == ["test_0.png"]
    assert capsys.readouterr().err == f"python -m nmt.plot: warning: {artifacts}: sentence 1 is empty, skipped\n"


def test_missing_index_names_file_and_range(artifacts):
    with pytest.raises(KeyError, match=r"test\.alignments\.npz.*0\.\.3"):
        plot_npz(artifacts, [99])


@pytest.mark.parametrize("bad_line", ['{"source_tokens": []}', "not json", '{"index": "x"}', '{"index": 1.5}'])
def test_a_bad_jsonl_line_names_file_and_line(artifacts, tmp_path, capsys, bad_line):
    """A damaged token file: the error names the file and the line (it was a bare "index" or a JSON message),
    in the library and in one usage line of the program."""
    jsonl = artifacts.with_name("test.alignments.jsonl")
    lines = jsonl.read_text(encoding="utf-8").splitlines()
    lines[1] = bad_line
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(jsonl))}: line 2 is not a token record with an index"):
        plot_npz(artifacts, [0], tmp_path / "plots")
    with pytest.raises(SystemExit):
        main([str(artifacts), "index=0", f"out={tmp_path / 'plots'}"])
    assert f"{jsonl}: line 2 is not a token record" in capsys.readouterr().err


def test_main_reports_damaged_files_and_unwritable_folders_in_one_line(artifacts, tmp_path, capsys):
    """A truncated .npz, a .jsonl that is not UTF-8 and an out= under a file: one usage error line each naming
    the file (they were tracebacks or a message without the file; the out= one said only [Errno 20])."""
    truncated = tmp_path / "t.alignments.npz"
    truncated.write_bytes(artifacts.read_bytes()[:200])
    artifacts.with_name("test.alignments.jsonl").replace(tmp_path / "t.alignments.jsonl")
    for argv, message in [([str(truncated)], f"{truncated} is not a readable .npz file"),
                          ([str(artifacts), f"out={truncated / 'sub'}"],
                           f"out={truncated / 'sub'}: {truncated} is a file, not a folder")]:
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("python -m nmt.plot: error: ")]
        assert "Traceback" not in err and len(errors) == 1 and message in errors[0], err  # after the usage lines
    bad = tmp_path / "b.alignments.npz"
    bad.write_bytes(artifacts.read_bytes())
    (tmp_path / "b.alignments.jsonl").write_bytes(b"\x91\x92 not utf-8\n")
    with pytest.raises(SystemExit):
        main([str(bad)])
    assert f"{tmp_path / 'b.alignments.jsonl'} is not UTF-8 text" in capsys.readouterr().err


def test_a_translation_given_instead_of_its_alignments_is_named(tmp_path, capsys):
    """``nmt-plot news.en`` (the translation, not news.alignments.npz) says what to give, not that a
    news.jsonl is missing."""
    translation = tmp_path / "news.en"
    translation.write_text("A dog runs.\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main([str(translation)])
    err = capsys.readouterr().err
    assert f"{translation} is not an alignments file: give the .npz" in err, err
    assert "news.jsonl" not in err and "Traceback" not in err
    with pytest.raises(ValueError, match="alignments=X.alignments.npz"):
        plot_npz(tmp_path / "missing.txt", [0])


def test_a_damaged_compressed_npz_is_one_error_line(tmp_path, capsys, monkeypatch):
    """Bytes flipped inside a compressed matrix (as evaluate writes them) surface as a CRC or zlib error when the
    matrix is read: one error line naming the file, never a traceback."""
    monkeypatch.setattr(plot_module, "_draw_heatmap", lambda *args: None)  # what is read is tested, not drawing
    matrix = np.zeros((30, 40), np.float32)  # compressible, like real attention: deflate codes, not stored blocks
    matrix[np.arange(30), np.arange(30)] = 0.75
    matrix[:, 39] = 0.25
    good = tmp_path / "c.alignments.npz"
    np.savez_compressed(good, **{"0": matrix})
    tokens = {"index": 0, "source_tokens": [f"s{i}" for i in range(40)], "hypothesis_tokens": [f"h{i}" for i in range(30)]}
    data = good.read_bytes()
    for position in range(len(data)):  # every byte: zip and npy headers, compressed data (zlib errors), CRC
        damaged = tmp_path / f"d{position}.alignments.npz"
        flipped = bytearray(data)
        flipped[position] ^= 0xFF
        damaged.write_bytes(bytes(flipped))
        damaged.with_name(f"d{position}.alignments.jsonl").write_text(json.dumps(tokens) + "\n", encoding="utf-8")
        try:
            main([str(damaged), f"out={tmp_path / 'plots'}"])
        except SystemExit:
            err = capsys.readouterr().err
            assert str(damaged) in err and "not found" not in err and "Traceback" not in err, err


def test_a_missing_index_draws_nothing(artifacts, tmp_path):
    """Every index is checked before any heatmap is drawn: a bad one leaves no partial set of plots."""
    out = tmp_path / "plots"
    with pytest.raises(KeyError, match="index 99 not in"):
        plot_npz(artifacts, [0, 2, 99], out)
    assert not out.exists() or not any(out.iterdir())


def test_main_cli(artifacts, tmp_path, capsys):
    out = tmp_path / "cli"
    paths = main([str(artifacts), "index=[0,3]", f"out={out}"])
    assert sorted(p.name for p in out.iterdir()) == ["test_0.png", "test_3.png"]
    assert all(png_size(p) for p in paths)
    assert "test_0.png" in capsys.readouterr().out
    # defaults: index=0, out= the npz's folder
    main([str(artifacts)])
    assert (artifacts.parent / "test_0.png").is_file()
    with pytest.raises(SystemExit):
        main([str(artifacts), "index=42"])


def test_figure_grows_with_sentence_length(tmp_path):
    small = plot_alignment(
        np.eye(3, dtype=np.float32), ["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], tmp_path / "small.png"
    )
    n = 60
    src = [f"▁wört{i}" for i in range(n)]
    hyp = [f"▁w{i}" for i in range(n - 10)]
    big = plot_alignment(
        np.full((n - 10, n), 1.0 / n, np.float32), src, hyp, tmp_path / "big.png", title="60 tokens"
    )
    (w_small, h_small), (w_big, h_big) = png_size(small), png_size(big)
    assert w_big > 3 * w_small and h_big > 3 * h_small
    assert w_big >= n * 20  # at least ~20 px per source token at dpi 100


def test_a_long_sentence_is_drawn_smaller_with_a_warning(tmp_path):
    """A 250-subword line once gave a 7250 x 648 px image nobody could read: the size is capped, with a warning."""
    n = 250
    src, hyp = [f"▁w{i}" for i in range(n)], [f"▁v{i}" for i in range(20)]
    with pytest.warns(UserWarning, match=r"20 x 250 tokens, drawn at 28% of full size"):
        path = plot_alignment(np.full((20, n), 1.0 / n, np.float32), src, hyp, tmp_path / "long.png")
    width, height = png_size(path)
    assert width <= 2300 and height >= 300  # ~ FULL_SIZE_TOKENS tokens' width; the rows still visible
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 70 tokens or fewer: full size, no warning
        plot_alignment(np.full((20, 70), 1.0 / 70, np.float32), src[:70], hyp, tmp_path / "full.png")


def test_byte_pieces_are_labelled_with_the_characters_they_spell():
    pieces = ["▁A", "▁", "<0xF0>", "<0x9F>", "<0xA6>", "<0x9C>", "▁dog", "<0xC3>", "<0xA9>", "<0x0A>", "<0xFF>",
              "<0xE4>", "<0xB8>", "</s>"]
    assert display_tokens(pieces) == ["A", "▁", "🦜", "·", "·", "·", "dog", "é", "·", "<0x0A>", "<0xFF>",
                                      "<0xE4>", "<0xB8>", "</s>"]  # a newline, a stray byte, a cut character
    assert display_tokens(["▁Mann", "s"]) == ["Mann", "·s"]


def test_shape_mismatch_raises(tmp_path):
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        plot_alignment(np.zeros((2, 3)), ["▁a", "</s>"], ["▁x", "▁y", "</s>"], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_display_token():
    assert display_token("▁Mann") == "Mann"
    assert display_token("s") == "·s"
    assert display_token("</s>") == "</s>"
    assert display_token("<0xC3>") == "<0xC3>"
    assert display_token("▁") == "▁"


def test_gold_links_drawn_over_word_level_attention(tmp_path):
    """gold= merges pieces into words and draws the sentence's gold links; links outside the words fail."""
    from nmt.decoding.artifacts import save_alignments
    from nmt.decoding.translation import Translation

    src, hyp = ["▁Ein", "▁Mann", "s", "</s>"], ["▁A", "▁m", "an", "</s>"]
    matrix = np.array([[0.9, 0.1, 0.0, 0.0], [0.1, 0.5, 0.4, 0.0], [0.0, 0.6, 0.4, 0.0], [0.0, 0.0, 0.0, 1.0]],
                      np.float32)
    npz = tmp_path / "gold.alignments.npz"
    save_alignments(npz, [Translation("A man", src, hyp, matrix, 0.0), Translation("A man", src, hyp, matrix, 0.0)])
    gold = tmp_path / "gold.txt"
    gold.write_text("1-1 2-2 1p2\n1-1 3-2\n", encoding="utf-8")  # 1-based; line 2 has a link past "Manns"
    paths = main([str(npz), "index=0", f"gold={gold}", "one_based=true", f"out={tmp_path / 'p'}"])
    assert [p.name for p in paths] == ["gold_0_gold.png"]
    image = plt_imread(paths[0])
    red = (image[..., 0] > 0.8) & (image[..., 1] < 0.3) & (image[..., 2] < 0.3)
    assert red.sum() > 50  # the squares and the dot are there
    plain = main([str(npz), "index=0", f"out={tmp_path / 'q'}"])[0]
    plain_image = plt_imread(plain)
    assert not ((plain_image[..., 0] > 0.8) & (plain_image[..., 1] < 0.3) & (plain_image[..., 2] < 0.3)).any()
    with pytest.raises(SystemExit):
        main([str(npz), "index=1", f"gold={gold}", "one_based=true", f"out={tmp_path / 'p'}"])
    with pytest.raises(ValueError, match=r"\[\(2, 1\)\] \(0-based\) fall outside the 2 source x 2.*one_based=true"):
        plot_alignment(np.eye(2), ["a", "b"], ["c", "d"], tmp_path / "x.png", sure={(2, 1)}, words=True)


def plt_imread(path):
    import matplotlib.image

    return matplotlib.image.imread(path)

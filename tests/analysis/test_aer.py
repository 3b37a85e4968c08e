"""nmt.aer: AER by hand, every gold format / index base / side order, the three real gold sets against
themselves, sentence-count mismatches and the out-of-range link of the German-English set (its SOURCE.md)."""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import pytest

from nmt.analysis.aer import aer, main
from nmt.analysis.gold import (
    AlignmentFormatError,
    AlignmentWarning,
    format_pharaoh,
    read_alignments,
    read_hypothesis,
    read_lengths,
    read_naacl,
    read_pharaoh,
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Overrides conftest's torch thread fixture: nmt.aer is stdlib only, and importing torch would take
    most of this module's run time."""
    yield


# ----------------------------------------------------------------------------------------------------
# A hand-made example. Links are (source, target), 0-based.
#   sentence 1: S = {(0,0), (1,2)}, P-labelled = {(1,1), (2,2)}  ->  P = S ∪ P-labelled (4 links)
#               A = {(0,0), (1,1), (2,1)}
#   sentence 2: S = {(0,1)}, no P-labelled links                 ->  P = S (1 link)
#               A = {(0,0)}
# Corpus: |A| = 4, |S| = 3, |P| = 5
#   A∩S = {(0,0)}                         -> 1
#   A∩P = {(0,0), (1,1)}                  -> 2      ((2,1) and sentence 2's (0,0) are in neither)
#   precision = |A∩P| / |A| = 2/4 = 0.5
#   recall    = |A∩S| / |S| = 1/3
#   AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) = 1 - (1 + 2) / (4 + 3) = 4/7 = 0.571428...
# ----------------------------------------------------------------------------------------------------
HAND_SURE = [{(0, 0), (1, 2)}, {(0, 1)}]
HAND_P_ONLY = [{(1, 1), (2, 2)}, set()]
HAND_HYP = [{(0, 0), (1, 1), (2, 1)}, {(0, 0)}]


def test_hand_made_example():
    result = aer(HAND_SURE, HAND_P_ONLY, HAND_HYP)
    assert result.aer == pytest.approx(4 / 7)
    assert result.precision == pytest.approx(0.5)
    assert result.recall == pytest.approx(1 / 3)
    assert (result.sentences, result.sure, result.possible, result.hypothesis) == (2, 3, 5, 4)
    assert (result.hyp_and_sure, result.hyp_and_possible) == (1, 2)
    # P given with S already inside it scores the same (S is added to P either way)
    with_s = [s | p for s, p in zip(HAND_SURE, HAND_P_ONLY)]
    assert aer(HAND_SURE, with_s, HAND_HYP) == result


def test_bounds_and_edge_cases():
    possible = [s | p for s, p in zip(HAND_SURE, HAND_P_ONLY)]
    for hyp in (HAND_SURE, possible):  # every S ⊆ A ⊆ P is perfect
        result = aer(HAND_SURE, HAND_P_ONLY, hyp)
        assert (result.aer, result.precision, result.recall) == (0.0, 1.0, 1.0)
    # only the possible-only links: precision 1, recall 0, AER = 1 - 2/(2+3)
    result = aer(HAND_SURE, HAND_P_ONLY, HAND_P_ONLY)
    assert (result.precision, result.recall, result.aer) == (1.0, 0.0, pytest.approx(0.6))
    # sure-only gold (possible=None): AER = 1 - F1
    result = aer(HAND_SURE, None, HAND_HYP)
    f1 = 2 * result.precision * result.recall / (result.precision + result.recall)
    assert result.aer == pytest.approx(1 - f1)
    empty = aer([set()], [set()], [set()])
    assert math.isnan(empty.aer) and math.isnan(empty.precision) and math.isnan(empty.recall)
    assert aer(HAND_SURE, None, [set(), set()]).aer == 1.0


def test_mismatched_sentence_counts_raise():
    with pytest.raises(ValueError, match=r"sure 2.*hypothesis 3"):
        aer(HAND_SURE, HAND_P_ONLY, HAND_HYP + [set()])


# ----------------------------------------------------------------------------------------------------
# One alignment in every format: source words 3 and 2 (sentence 1, 2), the hand-made links above
# ----------------------------------------------------------------------------------------------------
def _naacl(sure, p_only, *, one_based, target_first, pad=False, extra=""):
    shift = 1 if one_based else 0
    lines = []
    for k, (s_links, p_links) in enumerate(zip(sure, p_only), start=1):
        sid = f"{k:04d}" if pad else str(k)
        for links, label in ((s_links, "S"), (p_links, "P")):
            for s, t in sorted(links):
                a, b = (t, s) if target_first else (s, t)
                lines.append(f"{sid} {a + shift} {b + shift} {label}{extra}")
    return "\n".join(lines) + "\n"


def _pharaoh(sure, p_only, *, one_based, target_first, mark="p"):
    shift = 1 if one_based else 0
    out = []
    for s_links, p_links in zip(sure, p_only):
        tokens = []
        for links, sep in ((s_links, "-"), (p_links, mark)):
            for s, t in sorted(links, reverse=True):  # unsorted, as in enfr.gold
                a, b = (t, s) if target_first else (s, t)
                tokens.append(f"{a + shift}{sep}{b + shift}")
        out.append(" ".join(tokens))
    return "\n".join(out) + "\n"


VARIANTS = {
    "pharaoh-0-src": (
        "pharaoh",
        False,
        False,
        _pharaoh(HAND_SURE, HAND_P_ONLY, one_based=False, target_first=False),
    ),
    "pharaoh-1-src": (
        "pharaoh",
        True,
        False,
        _pharaoh(HAND_SURE, HAND_P_ONLY, one_based=True, target_first=False),
    ),
    "pharaoh-0-tgt": (
        "pharaoh",
        False,
        True,
        _pharaoh(HAND_SURE, HAND_P_ONLY, one_based=False, target_first=True),
    ),
    "pharaoh-1-tgt-?": (
        "pharaoh",
        True,
        True,
        _pharaoh(HAND_SURE, HAND_P_ONLY, one_based=True, target_first=True, mark="?"),
    ),
    "naacl-1-src-padded": (
        "naacl",
        True,
        False,
        _naacl(HAND_SURE, HAND_P_ONLY, one_based=True, target_first=False, pad=True),
    ),
    "naacl-0-src": (
        "naacl",
        False,
        False,
        _naacl(HAND_SURE, HAND_P_ONLY, one_based=False, target_first=False),
    ),
    "naacl-1-tgt-confidence": (
        "naacl",
        True,
        True,
        _naacl(HAND_SURE, HAND_P_ONLY, one_based=True, target_first=True, extra=" 0.75"),
    ),
    "naacl-0-tgt-trailing-space": (
        "naacl",
        False,
        True,
        _naacl(HAND_SURE, HAND_P_ONLY, one_based=False, target_first=True, extra=" "),
    ),
}


@pytest.mark.parametrize("encoding", ["plain", "bom-crlf", "gzip"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_format_gives_the_same_links(tmp_path, name, encoding):
    fmt, one_based, target_first, text = VARIANTS[name]
    path = tmp_path / "gold.txt"
    if encoding == "plain":
        path.write_bytes(text.encode())
    elif encoding == "bom-crlf":
        path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    else:
        path = tmp_path / "gold.gz"
        path.write_bytes(gzip.compress(text.encode()))
    gold = read_alignments(
        path, fmt, one_based=one_based, target_first=target_first, lengths=[(3, 3), (2, 2)]
    )
    assert gold.sure == HAND_SURE
    assert gold.possible == [s | p for s, p in zip(HAND_SURE, HAND_P_ONLY)]
    assert gold.dropped == [] and gold.null_links == 0


def test_naacl_label_defaults_to_sure_and_null_links_are_skipped(tmp_path):
    path = tmp_path / "gold.wa"
    path.write_text("1 1 1\n1 0 2 S\n\n2 2 0 P\n2 1 2 p\n")
    gold = read_naacl(path, one_based=True)
    assert gold.sure == [{(0, 0)}, set()]
    assert gold.possible == [{(0, 0)}, {(0, 1)}]
    assert gold.null_links == 2


def test_naacl_sentence_ids_map_to_positions(tmp_path):
    path = tmp_path / "gold.wa"
    path.write_text("3 1 1 S\n1 2 2 S\n")  # any order; sentence 2 has no links
    assert read_naacl(path, one_based=True).sure == [{(1, 1)}, set(), {(0, 0)}]
    assert len(read_naacl(path, one_based=True, num_sentences=5)) == 5
    assert read_naacl(path, one_based=True, first_sentence_id=0).sure == [set(), {(1, 1)}, set(), {(0, 0)}]
    with pytest.raises(AlignmentFormatError, match=r"gold\.wa: line 1: sentence id 3 is beyond"):
        read_naacl(path, one_based=True, num_sentences=2)
    path.write_text("1 1 1 S\n0 2 2 S\n")
    with pytest.raises(AlignmentFormatError, match=r"gold\.wa: line 2: sentence id 0"):
        read_naacl(path, one_based=True)


@pytest.mark.parametrize(
    ("fmt", "text", "line"),
    [
        ("pharaoh", "0-0 1-1\n0-0 1x1\n", 2),
        ("pharaoh", "0-0\n-1-2\n", 2),
        ("naacl", "1 1 1 S\n1 1 X S\n", 2),
        ("naacl", "1 1 1 S\n1 1 1 Q\n", 2),
        ("naacl", "1 1 1 S\n\n1 1\n", 3),
        ("naacl", "1 1 1 S 0.5 extra\n", 1),
    ],
)
def test_errors_name_file_and_line(tmp_path, fmt, text, line):
    path = tmp_path / "bad.align"
    path.write_text(text)
    with pytest.raises(AlignmentFormatError, match=rf"bad\.align: line {line}:"):
        read_alignments(path, fmt)


def test_out_of_range_links_are_dropped_with_a_warning(tmp_path):
    path = tmp_path / "hyp.align"
    path.write_text("0-0 2-1\n0-0\n")
    with pytest.warns(
        AlignmentWarning, match=r"hyp\.align: line 1: link '2-1' of sentence 1 is out of range"
    ):
        links = read_hypothesis(path, lengths=[(2, 2), (1, 1)])
    assert links == [{(0, 0)}, {(0, 0)}]
    with pytest.raises(ValueError, match=r"2 sentences .* have 3"):
        read_pharaoh(path, lengths=[(2, 2)] * 3)


def test_format_pharaoh_round_trip(tmp_path):
    possible = [s | p for s, p in zip(HAND_SURE, HAND_P_ONLY)]
    for one_based in (False, True):
        path = tmp_path / f"gold{int(one_based)}.align"
        path.write_text(
            "".join(format_pharaoh(s, p, one_based=one_based) + "\n" for s, p in zip(HAND_SURE, possible))
        )
        gold = read_pharaoh(path, one_based=one_based)
        assert (gold.sure, gold.possible) == (HAND_SURE, possible)
    assert format_pharaoh({(1, 2), (0, 0)}, {(1, 1), (0, 0)}) == "0-0 1-2 1p1"
    assert format_pharaoh(set()) == ""


def test_cli_hand_made(tmp_path, capsys):
    gold, hyp = tmp_path / "gold.wa", tmp_path / "hyp.align"
    gold.write_text(VARIANTS["naacl-1-src-padded"][3])
    hyp.write_text("".join(" ".join(f"{s}-{t}" for s, t in sorted(links)) + "\n" for links in HAND_HYP))
    assert main([f"gold={gold}", "gold_format=naacl", "one_based=true", f"hyp={hyp}"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        "AER 0.5714  precision 0.5000  recall 0.3333  (sure 3, possible 5, hypothesis 4 links, 2 sentences)"
    )
    hyp.write_text(hyp.read_text() + "0-0\n")
    assert main([f"gold={gold}", "gold_format=naacl", "one_based=true", f"hyp={hyp}"]) == 1
    assert "has 2 sentences but" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------
# The real gold sets in $NMT_DATA_DIR (default <repo>/../shared/corpora, set by conftest.py)
# ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpora() -> Path:
    folder = Path(os.environ["NMT_DATA_DIR"])
    needed = [folder / name for name in ("align_enfr_hansards", "align_deen_bicici100", "align_roen_wpt2003")]
    missing = [str(p) for p in needed if not p.is_dir()]
    if missing:
        pytest.fail(
            f"gold alignment sets not found: {missing}; set NMT_DATA_DIR to the corpora folder", pytrace=False
        )
    return folder


def _self_score(gold, tmp_path, lengths):
    """Gold written as 0-based Pharaoh (sure i-j, possible ipj) and read back as a hypothesis: the sure links
    alone and all the links both score AER 0 (S ⊆ A ⊆ P); the possible-only links alone do not."""
    path = tmp_path / "gold_as_hyp.align"
    path.write_text("".join(format_pharaoh(s, p) + "\n" for s, p in zip(gold.sure, gold.possible)))
    all_links = read_hypothesis(path, lengths=lengths)
    assert all_links == gold.possible
    for hyp in (gold.sure, all_links):
        result = aer(gold.sure, gold.possible, hyp)
        assert (result.aer, result.precision, result.recall) == (0.0, 1.0, 1.0)
    return path


def test_gold_enfr_hansards(corpora, tmp_path, capsys, recwarn):
    folder = corpora / "align_enfr_hansards"
    lengths = read_lengths(folder / "test.e.gz", folder / "test.f.gz")
    assert read_lengths(folder / "enfr.src-tgt.gz") == lengths
    naacl = read_naacl(folder / "test.wa.nonullalign.gz", one_based=True, lengths=lengths)
    pharaoh = read_pharaoh(folder / "enfr.gold.gz", one_based=True, lengths=lengths)
    assert (naacl.sure, naacl.possible) == (pharaoh.sure, pharaoh.possible)
    n_possible = sum(map(len, naacl.possible))
    assert (len(naacl), sum(map(len, naacl.sure)), n_possible) == (447, 4038, 4038 + 13400)
    assert not naacl.dropped and not pharaoh.dropped and naacl.null_links == 0
    hyp = _self_score(naacl, tmp_path, lengths)
    # possible-only links as the hypothesis: precision 1, recall 0
    p_only = aer(naacl.sure, naacl.possible, [p - s for s, p in zip(naacl.sure, naacl.possible)])
    assert (p_only.precision, p_only.recall) == (1.0, 0.0)
    dev_lengths = read_lengths(folder / "dev.e.gz", folder / "dev.f.gz")
    dev = read_naacl(folder / "dev.wa.nonullalign.gz", one_based=True, lengths=dev_lengths)
    assert (len(dev), sum(map(len, dev.sure)), sum(map(len, dev.possible))) == (37, 338, 338 + 1446)
    assert not recwarn.list
    # the command line, NAACL gold against the Pharaoh copy of itself
    argv = [
        f"gold={folder / 'test.wa.nonullalign.gz'}",
        "gold_format=naacl",
        "one_based=true",
        f"hyp={hyp}",
        f"src={folder / 'test.e.gz'}",
        f"tgt={folder / 'test.f.gz'}",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(
        "AER 0.0000  precision 1.0000  recall 1.0000  (sure 4038, possible 17438"
    )


def test_gold_deen_bicici_out_of_range_link(corpora, tmp_path, capsys):
    folder = corpora / "align_deen_bicici100"
    lengths = read_lengths(folder / "test.de.gz", folder / "test.en.gz")  # test.de starts with a BOM
    assert lengths[62] == (13, 13)
    with pytest.warns(AlignmentWarning, match=r"de-en\.wa\.gz: line 63: link '12-16' of sentence 63"):
        pharaoh = read_pharaoh(folder / "de-en.wa.gz", lengths=lengths)
    with pytest.warns(AlignmentWarning, match=r"de-en\.ref\.wa\.gz: line 776: link '12 16' of sentence 63"):
        naacl = read_naacl(folder / "de-en.ref.wa.gz", lengths=lengths)
    assert len(pharaoh.dropped) == len(naacl.dropped) == 1
    assert (naacl.sure, naacl.possible) == (pharaoh.sure, pharaoh.possible)
    assert naacl.sure == naacl.possible  # sure links only
    assert (len(naacl), sum(map(len, naacl.sure))) == (100, 1232)
    assert (
        sum(map(len, read_pharaoh(folder / "de-en.wa.gz").sure)) == 1233
    )  # without lengths nothing is dropped
    _self_score(naacl, tmp_path, lengths)
    # the command line reports the dropped link on stderr and still scores
    argv = [
        f"gold={folder / 'de-en.wa.gz'}",
        f"hyp={folder / 'de-en.wa.gz'}",
        f"src={folder / 'test.de.gz'}",
        f"tgt={folder / 'test.en.gz'}",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("AER 0.0000")
    assert captured.err.count("line 63: link '12-16'") == 2  # once for the gold, once for the hypothesis


def test_gold_roen_wpt2003(corpora, tmp_path, recwarn):
    folder = corpora / "align_roen_wpt2003"
    lengths = read_lengths(folder / "roen.src-tgt.gz")
    gold = read_pharaoh(folder / "roen.gold.gz", one_based=True, lengths=lengths)
    assert (len(gold), sum(map(len, gold.sure))) == (248, 6198)
    assert gold.sure == gold.possible and not gold.dropped
    _self_score(gold, tmp_path, lengths)
    # the same links read 1-based target-first from a swapped copy
    swapped = tmp_path / "roen.tgt-src.gold"
    swapped.write_text("".join(" ".join(f"{t + 1}-{s + 1}" for s, t in links) + "\n" for links in gold.sure))
    assert read_pharaoh(swapped, one_based=True, target_first=True, lengths=lengths).sure == gold.sure
    assert not recwarn.list


def test_cli_warns_about_a_one_based_file_read_as_zero_based(corpora, capsys):
    gold = corpora / "align_roen_wpt2003" / "roen.gold.gz"
    assert main([f"gold={gold}", f"hyp={gold}"]) == 0
    assert "no link uses position 0; is the file 1-based (one_based=true)?" in capsys.readouterr().err


def test_cli_warns_about_a_zero_based_hypothesis_read_as_one_based(tmp_path, capsys):
    gold = tmp_path / "gold.txt"
    gold.write_text("1-1 2-2\n1-2\n", encoding="utf-8")
    hyp = tmp_path / "hyp.txt"  # 0-based: the same links as the gold
    hyp.write_text("0-0 1-1\n0-1\n", encoding="utf-8")
    assert main([f"gold={gold}", "one_based=true", f"hyp={hyp}"]) == 0
    out = capsys.readouterr()
    assert "AER 0.0000" in out.out and "link(s) use position 0" not in out.err
    assert main([f"gold={gold}", "one_based=true", f"hyp={hyp}", "hyp_one_based=true"]) == 0
    assert "hyp.txt: 2 link(s) use position 0, which a 1-based file reserves for NULL" in capsys.readouterr().err


def test_a_gold_file_read_with_the_wrong_origin_is_named(tmp_path):
    """The 0-based German-English gold set read as 1-based loses its links at position 0 (110 of them): nmt.aer,
    nmt.align's gold= and eval.gold all say so, through position_warning."""
    import os
    from pathlib import Path

    from nmt.analysis.aer import position_warning
    from nmt.analysis.align import _read_gold
    from nmt.data.textio import read_lines

    folder = Path(os.environ["NMT_DATA_DIR"]) / "align_deen_bicici100"
    sources, targets = read_lines(folder / "test.de.gz"), read_lines(folder / "test.en.gz")
    opts = {"gold": str(folder / "de-en.wa.gz"), "gold_one_based": True, "max_dropped": 0.05}
    gold, found = _read_gold(opts, sources, targets)
    assert gold.null_links == 110
    assert found[-1] == (f"gold={opts['gold']}: 110 link(s) use position 0, which a 1-based file reserves for NULL, "
                         "and were skipped; is the file 0-based (gold_one_based=false)?")
    gold, found = _read_gold({**opts, "gold_one_based": False}, sources, targets)
    assert not any("position 0" in message for message in found)  # read right: only the one out-of-range link
    shifted = [{(s + 1, t + 1) for s, t in sentence} for sentence in gold.possible]  # a 1-based file read as 0-based
    assert position_warning("f", shifted, 0, False) == "f: no link uses position 0; is the file 1-based?"
    assert position_warning("f", gold.possible, 0, False) is None


def test_many_dropped_links_are_counted_with_what_to_check(corpora, capsys):
    """src= and tgt= swapped: three dropped links are shown, then one line with the count and the likely causes,
    and no AER is printed (exit status 1) unless max_dropped allows that many."""
    folder = corpora / "align_enfr_hansards"
    gold, src, tgt = folder / "enfr.gold.gz", folder / "test.e.gz", folder / "test.f.gz"
    swapped = [f"gold={gold}", "one_based=true", f"hyp={gold}", "hyp_one_based=true", f"src={tgt}", f"tgt={src}"]
    assert main(swapped) == 1
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert not out and len(lines) == 5 and all("out of range" in line for line in lines[:4])
    assert "more link(s) out of range were dropped" in lines[3] and "src= and tgt= swapped" in lines[3]
    assert "of the 17438 links of" in lines[4] and "more than max_dropped=0.05" in lines[4]
    assert main([*swapped, "max_dropped=1"]) == 0 and capsys.readouterr().out.startswith("AER")
    assert main([f"gold={gold}", "one_based=true", f"hyp={gold}", "hyp_one_based=true", f"src={src}",
                 f"tgt={tgt}"]) == 0
    assert "AER 0.0000" in capsys.readouterr().out  # the right order drops nothing


def test_align_refuses_an_aer_when_many_gold_links_are_out_of_range(corpora):
    """nmt.align's gold= as nmt.aer: with src= and tgt= swapped 15% of the Hansards gold links fall outside the
    sentences, and no AER is computed unless max_dropped allows that many."""
    from nmt.analysis.align import _read_gold
    from nmt.data.textio import read_lines

    folder = corpora / "align_enfr_hansards"
    english, french = read_lines(folder / "test.e.gz"), read_lines(folder / "test.f.gz")
    opts = {"gold": str(folder / "enfr.gold.gz"), "gold_one_based": True, "max_dropped": 0.05}
    with pytest.raises(ValueError, match=r"2629 of the 17438 links of .*enfr\.gold\.gz \(15\.1%\) lie outside the "
                                         r"sentences.*more than max_dropped=0\.05.*gold_one_based=.*src= and tgt= "
                                         r"swapped"):
        _read_gold(opts, french, english)
    gold, found = _read_gold({**opts, "max_dropped": 1.0}, french, english)
    assert len(gold.dropped) == 2629 and "so many usually mean" in found[3]
    gold, found = _read_gold(opts, english, french)  # the right order
    assert not gold.dropped and not found


def test_a_one_based_file_read_as_zero_based_is_refused(corpora, capsys):
    """The Hansards gold is 1-based: read as 0-based only 2.6% of its links fall outside the sentences (under
    max_dropped), but none uses position 0, so nmt.aer and nmt.align's gold= refuse and name the setting."""
    from nmt.analysis.align import _read_gold
    from nmt.data.textio import read_lines

    folder = corpora / "align_enfr_hansards"
    gold, src, tgt = folder / "enfr.gold.gz", folder / "test.e.gz", folder / "test.f.gz"
    files = [f"gold={gold}", f"hyp={gold}", "hyp_one_based=true", f"src={src}", f"tgt={tgt}"]
    assert main(files) == 1
    assert ("no link uses position 0 and 461 link(s) lie past the end of their sentences: the file looks 1-based; "
            "give one_based=true") in capsys.readouterr().err
    assert main([*files, "max_dropped=1"]) == 0 and capsys.readouterr().out.startswith("AER")
    assert main([*files, "one_based=true"]) == 0 and "AER 0.0000" in capsys.readouterr().out
    opts = {"gold": str(gold), "gold_one_based": False, "max_dropped": 0.05}
    with pytest.raises(ValueError, match="looks 1-based; give gold_one_based=true"):
        _read_gold(opts, read_lines(src), read_lines(tgt))

"""Strict text reading and atomic writing (nmt.data.textio): what a line is, encodings, gzip, stdin."""

import gzip
import io
import sys

import pytest

from nmt.data.textio import TextFileError, atomic_write, read_lines


def write(tmp_path, data: bytes, name="in.txt"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"a\nb\n", ["a", "b"]),
        (b"a\nb", ["a", "b"]),  # a last line without "\n" counts
        (b"a\n\n", ["a", ""]),  # an empty last line is a line
        (b"\n", [""]),
        (b"", []),
        (b"a\r\nb\r\n", ["a", "b"]),  # CRLF counts as LF
        (b"a\r\n\r\nb", ["a", "", "b"]),
        (b"a\r\nb\nc\r\n", ["a", "b", "c"]),  # mixed line ends
        (b"  a \t\n", ["  a \t"]),  # other whitespace is kept
    ],
)
def test_line_ends(tmp_path, data, expected):
    assert read_lines(write(tmp_path, data)) == expected


@pytest.mark.parametrize("separator", ["\r", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c"])
def test_only_newline_splits(tmp_path, separator):
    """str.splitlines would split at each of these and shift every later line against its translation."""
    text = f"one{separator}still one\ntwo\n"
    assert read_lines(write(tmp_path, text.encode("utf-8"))) == [f"one{separator}still one", "two"]


def test_bom_dropped_only_at_start(tmp_path):
    data = "\ufeffHallo Welt\nzweite\n".encode()
    lines = read_lines(write(tmp_path, data))
    assert lines == ["Hallo Welt", "zweite"]
    assert not lines[0].startswith("\ufeff")


def test_latin1_error_names_file_line_and_byte(tmp_path):
    path = write(tmp_path, "Zeile eins\nGr\u00fc\u00dfe\n".encode("latin-1"), name="bad.de")
    with pytest.raises(TextFileError) as info:
        read_lines(path)
    message = str(info.value)
    assert str(path) in message
    assert "line 2" in message
    assert "0xfc" in message  # latin-1 "ü"
    assert isinstance(info.value, ValueError)


def test_gzip(tmp_path):
    path = tmp_path / "in.txt.gz"
    path.write_bytes(gzip.compress("\ufeffeins\r\nzwei\u2028drei\nvier".encode()))
    assert read_lines(path) == ["eins", "zwei\u2028drei", "vier"]


def test_gzip_latin1_error_names_gz_file(tmp_path):
    path = tmp_path / "bad.txt.gz"
    path.write_bytes(gzip.compress(b"ok\nok\n\xe9t\xe9\n"))
    with pytest.raises(TextFileError, match=r"bad\.txt\.gz: line 3: byte 0xe9"):
        read_lines(path)


def test_missing_file_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here.txt"):
        read_lines(tmp_path / "nothing-here.txt")


def test_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("a\r\n\nb\u2028c\n".encode())))
    assert read_lines("-") == ["a", "", "b\u2028c"]


def test_latin1_on_stdin_is_named_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("ok\nM\xfcller\n".encode("latin-1"))))
    with pytest.raises(TextFileError, match=r"^stdin: line 2: byte 0xfc at column 2 is not valid UTF-8; re-encode "
                                            r"the file as UTF-8 \(for example: iconv -f latin1 -t utf-8\)$"):
        read_lines("-")


def test_a_utf16_file_gets_the_utf16_conversion(tmp_path):
    path = tmp_path / "windows.txt"
    path.write_text("Müller\nzwei\n", encoding="utf-16")  # with its byte-order mark, as Windows tools write it
    with pytest.raises(TextFileError, match=rf"line 1: byte 0x(ff|fe) at column 1 .*iconv -f utf-16 -t utf-8 {path}"):
        read_lines(path)
    (tmp_path / "latin1.txt").write_bytes("ok\nM\xfcller\n".encode("latin-1"))  # not at the start: latin1 advice
    with pytest.raises(TextFileError, match="line 2: .*iconv -f latin1"):
        read_lines(tmp_path / "latin1.txt")


def test_atomic_write_roundtrip(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    atomic_write(path, "eins\nzwei\u2028drei\n")
    atomic_write(path, "neu\n")  # replaces an existing file
    assert read_lines(path) == ["neu"]
    atomic_write(tmp_path / "sub" / "b.bin", b"\x00\x01")
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.bin", "out.txt"]  # no temp files left


def test_atomic_write_stdout(capsys):
    atomic_write("-", "a\nb\n")
    assert capsys.readouterr().out == "a\nb\n"


def test_atomic_write_gives_the_mode_open_would(tmp_path):
    import os
    import stat

    from nmt.data.textio import atomic_write as write

    old = os.umask(0o022)
    try:
        write(tmp_path / "out.txt", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o644


def test_gzip_that_does_not_decompress_is_a_text_file_error(tmp_path):
    truncated = tmp_path / "cut.txt.gz"
    whole = gzip.compress(b"eins\nzwei\n" * 100)
    truncated.write_bytes(whole[: len(whole) - 10])  # the stream's end is missing
    not_gzip = tmp_path / "plain.txt.gz"
    not_gzip.write_bytes(b"eins\nzwei\n")
    for path in (truncated, not_gzip):
        with pytest.raises(TextFileError, match=rf"{path.name}: not a readable gzip file"):
            read_lines(path)


def test_folder_is_not_a_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="input=.* is a folder, not a file"):
        read_lines(tmp_path, key="input")


def test_named_pipe_is_read_and_written_not_replaced(tmp_path):
    """A FIFO (what ``input=<(zcat f.gz)`` or ``output=>(gzip > f.gz)`` hands over) is read or written through;
    atomic_write used to rename a regular file over it, so its reader waited forever."""
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    atomic_write(fifo, "eins\nzwei\n")
    reader.join(timeout=10)
    assert received == [b"eins\nzwei\n"]
    assert fifo.is_fifo()  # still the pipe

    writer = threading.Thread(target=lambda: fifo.write_bytes(b"drei\n"))
    writer.start()
    assert read_lines(fifo) == ["drei"]
    writer.join(timeout=10)


def test_atomic_write_follows_a_symlink(tmp_path):
    target = tmp_path / "real" / "out.txt"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    atomic_write(link, "new\n")
    assert link.is_symlink()
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]  # no temp file left beside the target

"""fabnb.core.files: the one reader of files named by a file or a request (issue 46, items 2, 4 and 7)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fabnb.core.files import FileRefused, inside, read_bytes, read_text
from fabnb.data.datasets import DatasetError, read_qa_files
from fabnb.experiment import Experiment, ExperimentError


def test_special_files_are_refused_before_they_are_opened(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes: it must not be opened at all
    for path, kind in (("/dev/zero", "character device"), (fifo, "named pipe"), (tmp_path, "folder")):
        with pytest.raises(FileRefused, match=f"setting X: {path} is not a regular file \\(a {kind}\\)"):
            read_text(path, setting="setting X")


def test_a_file_over_its_cap_is_refused_by_its_size_and_while_read(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 101)
    with pytest.raises(FileRefused, match="holds 101 bytes, over the 100"):
        read_bytes(big, setting="s", max_bytes=100)
    assert read_bytes(big, setting="s", max_bytes=101) == b"x" * 101


def test_text_names_the_byte_and_line_that_is_not_utf8_and_drops_a_bom(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "a"\noutput = "\xff"\n')
    with pytest.raises(FileRefused, match=r"not UTF-8 text \(byte 21, line 2"):
        read_text(bad, setting="the experiment file")
    bom = tmp_path / "bom.toml"
    bom.write_bytes("\ufeffname = 'a'".encode())
    assert read_text(bom, setting="s") == "name = 'a'"


def test_inside_follows_links_and_dots(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to("/usr")
    assert inside(tmp_path / "root" / "a" / ".." / "b", tmp_path / "root")
    assert not inside(tmp_path / "root" / "..", tmp_path / "root")
    assert not inside(tmp_path / "root" / "out" / "lib", tmp_path / "root")


def test_qa_files_that_are_devices_or_too_large_are_problems_not_reads(tmp_path):
    """Item 4: ``read_qa_files('/dev/zero')`` read until memory ran out (21.7 GB)."""
    qa = read_qa_files("/dev/zero")
    assert len(qa) == 0 and "not a regular file (a character device)" in qa.problems["message"][0]
    folder = tmp_path / "qa"
    folder.mkdir()
    (folder / "zero.json").symlink_to("/dev/zero")
    (folder / "huge.json").write_bytes(b" " * (16 * 1024 * 1024 + 1))
    qa = read_qa_files(folder)
    assert sorted(qa.problems["message"].str.slice(0, 22)) == ["holds 16,777,217 bytes", "is not a regular file "]
    with pytest.raises(DatasetError, match="2 QA file"):
        read_qa_files(folder, on_error="raise")


def test_a_questions_source_that_is_a_device_is_refused_at_the_file_check(tmp_path):
    """Item 4: ``[questions] source = "/dev/zero"`` was accepted ([corpus] refused it)."""
    path = tmp_path / "e.toml"
    path.write_text('name = "x"\noutput = "o"\n[questions]\nsource = "/dev/zero"\n[[systems]]\nname = "s"\n'
                    'model = "embedded"\n')
    with pytest.raises(ExperimentError, match=r"\[questions\] source = '/dev/zero' \(line 4\) is not a regular file"):
        Experiment.from_file(path)
    path.write_text(path.read_text().replace("/dev/zero", "nowhere"))
    with pytest.raises(ExperimentError, match=r"\[questions\] source = '.*nowhere' \(line 4\) does not exist"):
        Experiment.from_file(path)


def test_reading_dev_zero_under_a_memory_limit_ends_in_a_message_not_memoryerror(tmp_path):
    """The refusal, in a child under a 2 GB address-space limit: before the fix it ended in a raw MemoryError."""
    code = textwrap.dedent("""\
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 * 1024 ** 3, 2 * 1024 ** 3))
        from fabnb.data.datasets import read_qa_files
        print(read_qa_files("/dev/zero").problems["message"][0])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "not a regular file" in done.stdout


@pytest.mark.parametrize("content, words", [
    (b'name = "x"\n\xff\xfe = 1\n', ["not UTF-8 text", "line 2", "save it as UTF-8"]),
    (b'name = "x"\noutput = ""\n', ["output = \"folder\" (line 2) is required and may not be empty"]),
    (b'name = "x"\noutput = ".."\n', ["output = '..' (line 2)", "holds other files and no fabnb manifest.json"]),
    (b'name = "x"\noutput = "/etc"\n', ["output = '/etc' (line 2)", "holds other files"]),
])
def test_experiment_files_that_cannot_be_read_say_why_with_the_line(tmp_path, content, words):
    """Item 7: invalid UTF-8 gave a raw UnicodeDecodeError; output = "..", "/etc", "" had no line or key."""
    sub = tmp_path / "study"
    sub.mkdir()
    (tmp_path / "other.txt").write_text("a file of the user's")
    path = sub / "e.toml"
    path.write_bytes(content + b'[[systems]]\nname = "s"\nmodel = "embedded"\n')
    with pytest.raises(ExperimentError) as info:
        Experiment.from_file(path)
    for w in words:
        assert w in str(info.value), str(info.value)
    assert (tmp_path / "other.txt").read_text() == "a file of the user's"


def test_an_experiment_file_with_a_byte_order_mark_reads(tmp_path):
    """Item 7: a BOM gave 'Invalid statement (at line 1, column 1)' with no cause."""
    path = tmp_path / "e.toml"
    path.write_bytes("\ufeffname = 'x'\noutput = 'o'\n[[systems]]\nname = 's'\nmodel = 'embedded'\n".encode())
    assert Experiment.from_file(path).name == "x"


def test_a_manifest_path_is_read_through_the_confined_reader(tmp_path):
    from fabnb.views.explorer import _experiment_pairs

    with pytest.warns(UserWarning, match="outside the server's root"):
        assert _experiment_pairs({"questions_source": "/usr"}, root=tmp_path) == []
    with pytest.warns(UserWarning, match="experiment_file"):
        _experiment_pairs({"experiment_file": "/etc/passwd"}, root=tmp_path)


def test_a_corpus_knowledge_base_and_rater_manifest_that_are_devices_are_refused(tmp_path):
    """Item 4: every file read by a name from a file goes through the one reader."""
    from fabnb.corpus.collection import load_corpus
    from fabnb.corpus.terms import KnowledgeBase, KnowledgeBaseError
    from fabnb.qa.rating import RatingError, read_rater_manifest

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("A wafer is a thin slice of silicon.")
    (docs / "zero.txt").symlink_to("/dev/zero")
    assert list(load_corpus(docs).documents["doc_id"]) == ["a"]  # a folder lists regular files only
    corpus = load_corpus(docs / "zero.txt")  # named as the source itself: refused, not read
    assert corpus.documents.empty
    assert "not a regular file" in corpus.problems.set_index("doc_id").loc["zero", "message"]
    (tmp_path / "kb.yaml").symlink_to("/dev/zero")
    with pytest.raises(KnowledgeBaseError, match="knowledge base: .* is not a regular file"):
        KnowledgeBase.from_file(tmp_path / "kb.yaml")
    with pytest.raises(RatingError, match="not a readable manifest \\(is not a regular file"):
        read_rater_manifest("/dev/zero")

"""Pretraining data through `datasets`: the same samples as in-memory packing, the cache (also from a fresh process),
local dataset folders (map-style and streamed) and bad input. Real BabyLM text is read from ../shared/data (skipped
when it is missing); every cache goes to a tmp folder, never the user's."""

import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from elc_bert.data import corpus
from elc_bert.data.corpus import DatasetSource, document_dataset, packed_samples, streamed_samples
from elc_bert.data.jsonl import read_jsonl
from elc_bert.data.pretraining import pack_sentences, packed_segments
from elc_bert.data.text import corpus_files, read_documents, read_lines
from elc_bert.data.tokenizer import train_tokenizer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
BABYLM_DEV = SHARED / "babylm" / "2023" / "dev"
needs_shared = pytest.mark.skipif(not BABYLM_DEV.is_dir(), reason="../shared/data is not beside the repository")

DOCUMENTS = ["One two three.\nFour five six seven.\n\nEight nine.", "", "Ten eleven twelve.\n  \nThirteen."]


def reference_samples(documents: list[list[str]], tokenizer, seq_length: int) -> list[list[int]]:
    """In-memory packing, as `build_samples` in training/pretrain.py did before it used this module."""
    tokenized = [tokenizer(document, add_special_tokens=False)["input_ids"] for document in documents]
    segments = packed_segments(tokenized, seq_length - 2, "sentences")
    return [[tokenizer.cls_token_id, *segment, tokenizer.sep_token_id] for segment in segments]


def babylm_lines(name: str, count: int) -> list[str]:
    return read_lines(BABYLM_DEV / f"{name}.dev.gz")[:count]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A small tokenizer trained on real text (made-up text when ../shared/data is missing), saved to a folder."""
    lines = babylm_lines("switchboard", 3000) if BABYLM_DEV.is_dir() else " ".join(DOCUMENTS).split() * 20
    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(lines, vocab_size=600, min_frequency=2).save_pretrained(folder)
    return folder


@pytest.fixture
def tokenizer(tokenizer_dir):
    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture
def babylm_folder(tmp_path):
    """A BabyLM-style folder of real text: pieces of two dev files (one gzipped, one with blank lines between
    documents), under the names of the train split, and a file of another split that must not be read."""
    folder = tmp_path / "babylm"
    (folder / "nested").mkdir(parents=True)
    with gzip.open(folder / "switchboard.train.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(babylm_lines("switchboard", 400)) + "\n")
    (folder / "nested" / "children_stories.train").write_text("\n".join(babylm_lines("children_stories", 700)) + "\n")
    (folder / "cbt.dev").write_text("not the train split\n")
    return folder


class PackCounter:
    """Counts calls of `pack_sentences` inside `packed_samples`: none when its result comes from the cache."""

    def __init__(self, monkeypatch):
        self.calls = 0
        monkeypatch.setitem(corpus.PACKINGS, "sentences", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return pack_sentences(*args, **kwargs)


@needs_shared
def test_same_samples_as_in_memory_packing_on_babylm_files(babylm_folder, tokenizer, tmp_path):
    single = tmp_path / "wiki.txt"
    single.write_text("\n".join(DOCUMENTS) + "\n")
    files = corpus_files(babylm_folder, "train") + [single]
    assert len(files) == 3
    documents = document_dataset([babylm_folder, single], "train", cache_dir=tmp_path / "cache")
    expected = read_documents(files)
    assert len(expected) > 5, "the pieces hold several documents"
    assert documents["sentences"] == expected
    for seq_length in (16, 48):
        samples = packed_samples(documents, tokenizer, seq_length, progress=False)
        assert samples.column_names == ["input_ids", "words", "new_tokens", "missed_tokens"]
        assert samples["input_ids"] == reference_samples(expected, tokenizer, seq_length)
        assert max(len(ids) for ids in samples["input_ids"]) == seq_length


@pytest.mark.slow
def test_second_call_reads_the_cache_also_from_a_fresh_process(tmp_path, monkeypatch):
    (tmp_path / "text.train").write_text("\n".join(DOCUMENTS) + "\n")
    cache = tmp_path / "cache"
    # The tokenizer as a first run has it (trained in memory) and as a resumed run has it (loaded from its folder).
    trained = train_tokenizer(" ".join(DOCUMENTS).split() * 20, vocab_size=600, min_frequency=2)
    tokenizer_dir = tmp_path / "tokenizer"
    trained.save_pretrained(tokenizer_dir)
    first = packed_samples(document_dataset(tmp_path, cache_dir=cache), trained, 12, progress=False)
    counter = PackCounter(monkeypatch)
    documents = document_dataset(tmp_path, cache_dir=cache)
    again = packed_samples(documents, AutoTokenizer.from_pretrained(tokenizer_dir), 12, progress=False)
    assert counter.calls == 0 and again.cache_files == first.cache_files
    assert again["input_ids"] == first["input_ids"]
    assert Path(first.cache_files[0]["filename"]).is_relative_to(cache)

    script = f"""
import json
from transformers import AutoTokenizer
from elc_bert.data import corpus
calls = []
corpus.PACKINGS["sentences"] = lambda *args: calls.append(1)
documents = corpus.document_dataset({str(tmp_path)!r}, cache_dir={str(cache)!r})
samples = corpus.packed_samples(documents, AutoTokenizer.from_pretrained({str(tokenizer_dir)!r}), 12, progress=False)
print(json.dumps({{"calls": len(calls), "cache_files": samples.cache_files}}))
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    fresh = json.loads(result.stdout.strip().splitlines()[-1])
    assert fresh == {"calls": 0, "cache_files": first.cache_files}


def test_changed_file_and_other_lengths_are_prepared_again(tokenizer, tmp_path):
    path = tmp_path / "text.train"
    path.write_text("\n".join(DOCUMENTS) + "\n")
    cache = tmp_path / "cache"
    before = document_dataset(path, cache_dir=cache)
    samples = packed_samples(before, tokenizer, 12, progress=False)
    longer = packed_samples(before, tokenizer, 16, progress=False)
    assert longer.cache_files != samples.cache_files
    path.write_text("\n".join(DOCUMENTS) + "\n\nA new document.\n")
    after = document_dataset(path, cache_dir=cache)
    assert after["sentences"] == read_documents([path]) and len(after) == len(before) + 1
    changed = packed_samples(after, tokenizer, 12, progress=False)
    assert changed.cache_files != samples.cache_files
    assert changed["input_ids"] == reference_samples(read_documents([path]), tokenizer, 12)
    # The same size, a later modification time: read again too.
    mtime = path.stat().st_mtime_ns
    path.write_text(path.read_text().replace("A new", "A odd"))
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
    assert document_dataset(path, cache_dir=cache)["sentences"][-1] == ["A odd document."]


def test_dataset_source_on_a_local_dataset_folder(tokenizer, tmp_path):
    folder = tmp_path / "hub_like"
    folder.mkdir()
    rows = [{"text": text, "id": index} for index, text in enumerate(DOCUMENTS)]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = DatasetSource(str(folder))
    documents = document_dataset(source, cache_dir=tmp_path / "cache")
    expected = [["One two three.", "Four five six seven.", "Eight nine."], ["Ten eleven twelve.", "Thirteen."]]
    assert documents.column_names == ["sentences", "words"] and documents["sentences"] == expected
    assert documents["words"] == [9, 4]  # whitespace words of each text
    assert document_dataset(source, cache_dir=tmp_path / "cache").cache_files == documents.cache_files
    samples = packed_samples(documents, tokenizer, 12, progress=False)
    assert samples["input_ids"] == reference_samples(expected, tokenizer, 12)
    streamed = streamed_samples(source, tokenizer, 12, cache_dir=tmp_path / "cache")
    assert [row["input_ids"] for row in streamed] == samples["input_ids"]


def test_no_long_sequence_warning(tokenizer_dir, tmp_path):
    long_sentence = "one two three " * 200  # more tokens than the tokenizer's model_max_length (512)
    (tmp_path / "text.train").write_text(long_sentence + "\n")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    loggers = [logging.getLogger("transformers"), logging.getLogger("datasets")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        AutoTokenizer.from_pretrained(tokenizer_dir)([long_sentence], add_special_tokens=False)
        assert any("Token indices sequence length" in record.getMessage() for record in records), "capture works"
        records.clear()
        documents = document_dataset(tmp_path, cache_dir=tmp_path / "cache")
        samples = packed_samples(documents, AutoTokenizer.from_pretrained(tokenizer_dir), 16, progress=False)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert len(samples) > 30  # the sentence of hundreds of tokens is cut into samples
    messages = [record.getMessage() for record in records]
    assert not [message for message in messages if "Token indices" in message or "hashed" in message], messages


def test_bad_input_is_named(tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        document_dataset(tmp_path / "missing", cache_dir=tmp_path / "cache")
    (tmp_path / "blank.train").write_text("\n  \n\n")
    with pytest.raises(ValueError, match="no text in .*blank.train"):
        document_dataset(tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="'\\*.test'"):
        document_dataset(tmp_path, "test", cache_dir=tmp_path / "cache")
    folder = tmp_path / "no_text_column"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"content": "words"}) + "\n")
    source = DatasetSource(str(folder))
    for make in (
        lambda: document_dataset(source, cache_dir=tmp_path / "cache"),
        lambda: streamed_samples(source, tokenizer, 12, cache_dir=tmp_path / "cache"),
    ):
        with pytest.raises(ValueError, match="no_text_column.*no text column 'text'.*'content'"):
            make()
    (tmp_path / "ok.train").write_text("words\n")
    documents = document_dataset(tmp_path / "ok.train", cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="seq_length"):
        packed_samples(documents, tokenizer, 2)


def test_unreadable_files_name_file_and_line(tmp_path):
    """Not UTF-8, truncated and corrupt gzip: a ValueError naming the file (and the line where it is known), from
    the text readers, `document_dataset` and the JSON Lines reader alike."""
    (tmp_path / "latin1.train").write_bytes("first line\nsecond\nna\u00efve third\n".encode("latin-1"))
    whole = gzip.compress("".join(f"line {i} of some text\n" for i in range(20000)).encode())
    (tmp_path / "cut.train.gz").write_bytes(whole[: len(whole) // 2])
    corrupt = bytearray(whole)
    corrupt[-8] ^= 0xFF  # the checksum
    (tmp_path / "corrupt.train.gz").write_bytes(bytes(corrupt))
    expected = {
        "latin1.train": r"latin1\.train, line 3: not UTF-8 text \(byte 0xef at column 3\)",
        "cut.train.gz": r"cut\.train\.gz, line \d+: cannot be read \(truncated gzip data",
        "corrupt.train.gz": r"corrupt\.train\.gz, line \d+: cannot be read \(corrupt gzip data: CRC check failed",
    }
    for name, message in expected.items():
        for read in (read_lines, lambda path: read_documents([path])):
            with pytest.raises(ValueError, match=message):
                read(tmp_path / name)
        with pytest.raises(ValueError, match=message):
            document_dataset(tmp_path / name, cache_dir=tmp_path / "cache")
    good = json.dumps({"sentence": "fine"})
    (tmp_path / "rows.jsonl").write_bytes(f"{good}\n{good}\n".encode() + '{"sentence": "caf\u00e9"}\n'.encode("cp1252"))
    with pytest.raises(ValueError, match=r"rows\.jsonl, line 3: not UTF-8 text \(byte 0xe9 at column 18\)"):
        list(read_jsonl(tmp_path / "rows.jsonl"))
    (tmp_path / "rows.jsonl.gz").write_bytes(gzip.compress(f"{good}\n".encode() * 5000)[:-100])
    with pytest.raises(ValueError, match=r"rows\.jsonl\.gz, line \d+: cannot be read \(truncated gzip data"):
        list(read_jsonl(tmp_path / "rows.jsonl.gz"))


def test_a_small_truncated_gz_in_a_streamed_dataset_is_named(tmp_path):
    """A JSON Lines loader reads its first file as the stream is opened (to learn the columns): a small .gz cut short
    fails there, before any sample is drawn, and is named as a large one (which fails while streaming) is."""
    from elc_bert.models.errors import InputError

    folder = tmp_path / "corpus"
    folder.mkdir()
    whole = gzip.compress("".join(json.dumps({"text": f"line {i} of text"}) + "\n" for i in range(3)).encode())
    (folder / "train.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    tokenizer = train_tokenizer(["line of text"] * 10, 100, 1)
    with pytest.raises(InputError, match=rf"{folder / 'train.jsonl.gz'}: cannot be read to its end \(truncated"):
        streamed_samples(DatasetSource(str(folder)), tokenizer, 12, cache_dir=tmp_path / "cache")


def test_byte_order_mark_is_dropped(tmp_path):
    (tmp_path / "bom.train").write_text("\ufeffFirst sentence.\nSecond one.\n", encoding="utf-8")
    assert read_lines(tmp_path / "bom.train") == ["First sentence.", "Second one."]
    documents = document_dataset(tmp_path / "bom.train", cache_dir=tmp_path / "cache")
    assert documents["sentences"] == [["First sentence.", "Second one."]]
    with gzip.open(tmp_path / "bom.jsonl.gz", "wt", encoding="utf-8-sig") as handle:
        handle.write(json.dumps({"label": 1}) + "\n")
    assert list(read_jsonl(tmp_path / "bom.jsonl.gz")) == [(1, {"label": 1})]


def test_linked_folders_are_read_once_and_link_cycles_end(tmp_path, caplog):
    """A link to a folder inside a corpus folder is read (Python 3.11's `Path.rglob` skipped it without a word); a
    link back up the tree, or to a folder read already, is skipped with a warning instead of reading files twice (or
    forever); a broken link is refused by name."""
    from elc_bert.models.errors import InputError

    corpus_folder, elsewhere = tmp_path / "corpus", tmp_path / "disk" / "gutenberg"
    corpus_folder.mkdir()
    elsewhere.mkdir(parents=True)
    (corpus_folder / "cbt.train").write_text("Here .\n")
    (elsewhere / "gutenberg.train").write_text("There .\n")
    (corpus_folder / "linked").symlink_to(elsewhere)
    (elsewhere / "up").symlink_to(tmp_path / "disk")  # a cycle through the linked folder
    (corpus_folder / "again").symlink_to(corpus_folder)  # a cycle on the corpus folder itself
    with caplog.at_level(logging.WARNING, logger="elc_bert.data.text"):
        files = corpus_files(corpus_folder, "train")
    assert files == [corpus_folder / "cbt.train", corpus_folder / "linked" / "gutenberg.train"]
    assert f"{corpus_folder / 'again'}: skipped, a link to the folder {corpus_folder}, searched already" in caplog.text
    assert f"{corpus_folder / 'linked' / 'up' / 'gutenberg'}: skipped" in caplog.text
    documents = document_dataset(corpus_folder, cache_dir=tmp_path / "cache")
    assert documents["sentences"] == [["Here ."], ["There ."]]
    (corpus_folder / "moved").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match=r"moved: a broken symbolic link \(to .*nowhere\) in the folder"):
        corpus_files(corpus_folder, "train")

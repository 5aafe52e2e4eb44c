"""NER loaders on the staged data (read from ../shared/data, never copied here) and on made-up files."""

import gzip
import logging
from pathlib import Path

import pytest
from seqeval.scheme import IOB2, Entities

from elc_bert.data.ner import (
    CONLL03_LABELS,
    NerDataError,
    convert_scheme,
    few_shot_sample,
    load_conll03,
    load_wikiann,
    read_conll,
    tokenize_and_align_labels,
)
from elc_bert.data.tokenizer import train_tokenizer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not beside the repository")


@pytest.fixture(scope="module")
def conll():
    return {scheme: load_conll03(SHARED / "conll2003", scheme=scheme) for scheme in ("iob1", "iob2")}


def iob1_to_iob2(tags):
    """Naive conversion: an I- tag that does not continue an entity of the same type starts one (B-)."""
    out, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            out.append("B-" + tag[2:])
        else:
            out.append(tag)
        previous = tag
    return out


@needs_shared
def test_conll03_counts_match_the_published_statistics(conll):
    expected = {"train": (14041, 203621), "validation": (3250, 51362), "test": (3453, 46435)}
    for scheme in ("iob1", "iob2"):
        for split, (sentences, tokens) in expected.items():
            data = conll[scheme][split]
            assert len(data) == sentences, (scheme, split)
            assert sum(len(t) for t in data["tokens"]) == tokens, (scheme, split)
            assert not any("-DOCSTART-" in t for t in data["tokens"])


@needs_shared
def test_conll03_iob2_is_the_conversion_of_iob1(conll):
    names = conll["iob1"]["train"].features["ner_tags"].feature.names
    assert names == CONLL03_LABELS
    for split in ("train", "validation"):
        iob1, iob2 = conll["iob1"][split], conll["iob2"][split]
        for a, b in zip(iob1["ner_tags"], iob2["ner_tags"]):
            assert iob1_to_iob2([names[i] for i in a]) == [names[i] for i in b]


@needs_shared
def test_wikiann_layouts():
    rahimi = load_wikiann(SHARED / "wikiann", "en")
    assert [len(rahimi[s]) for s in ("train", "validation", "test")] == [20000, 10000, 10000]
    assert not any(token.startswith("en:") for tokens in rahimi["train"]["tokens"][:500] for token in tokens)
    assert rahimi["train"].features["ner_tags"].feature.names[:3] == ["O", "B-PER", "I-PER"]
    xtreme = load_wikiann(SHARED / "wikiann", "jv", layout="xtreme")
    assert "ner_tags" in xtreme["train"].column_names and "ner_tags" not in xtreme["test"].column_names


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_malformed_files_name_file_and_line(tmp_path):
    with pytest.raises(NerDataError, match=r"bad\.txt, line 3: 3 columns, expected 2"):
        read_conll(_write(tmp_path / "bad.txt", "Alice B-PER\nsaw O\nBob B-PER extra\n"))
    with pytest.raises(NerDataError, match=r"tag\.txt, line 2: unknown tag 'B-FOO'"):
        read_conll(_write(tmp_path / "tag.txt", "Alice B-PER\nacme B-FOO\n"), label_names=CONLL03_LABELS)
    with pytest.raises(NerDataError, match=r"empty\.txt: no sentences"):
        read_conll(_write(tmp_path / "empty.txt", "\n-DOCSTART- -X- -X- O\n\n"))
    (tmp_path / "iob2").mkdir()
    _write(tmp_path / "iob2" / "train.txt", "Alice B-PER\n")
    with pytest.raises(NerDataError, match=r"valid\.txt.*missing split"):
        load_conll03(tmp_path, scheme="iob2")


def test_read_conll_sentences_and_labels(tmp_path):
    path = _write(tmp_path / "a.txt", "-DOCSTART- -X- O\n\nAlice x B-PER\nsaw x O\n\n\nParis x B-LOC\n")
    data = read_conll(path)
    assert data["tokens"] == [["Alice", "saw"], ["Paris"]]
    names = data.features["ner_tags"].feature.names
    assert names[0] == "O" and [[names[i] for i in s] for s in data["ner_tags"]] == [["B-PER", "O"], ["B-LOC"]]


def test_few_shot_sample_is_reproducible_and_without_replacement(tmp_path):
    lines = "".join(f"w{i} O\n\n" for i in range(200))
    data = read_conll(_write(tmp_path / "many.txt", lines))
    a = few_shot_sample(data, 8, 4, seed=1)
    assert len(a) == 32 and len(set(a["id"])) == 32
    assert a["id"] == few_shot_sample(data, 8, 4, seed=1)["id"]
    assert a["id"] != few_shot_sample(data, 8, 4, seed=2)["id"]
    with pytest.raises(ValueError, match="201"):
        few_shot_sample(data, 67, 3, seed=0)


def test_first_sub_token_labelling():
    words = [["Unbelievably", "long", "Saunderson", "went", "home"], ["Paris", "lives"]]
    tokenizer = train_tokenizer([" ".join(w) for w in words] * 3, vocab_size=200, min_frequency=1)
    encoded = tokenize_and_align_labels({"tokens": words, "ner_tags": [[1, 0, 2, 0, 0], [5, 0]]}, tokenizer)
    for row, tags in enumerate([[1, 0, 2, 0, 0], [5, 0]]):
        word_ids = encoded.word_ids(row)
        labelled = [(w, label) for w, label in zip(word_ids, encoded["labels"][row]) if label != -100]
        assert [w for w, _ in labelled] == list(range(len(tags))), "exactly one labelled sub-token per word"
        assert [label for _, label in labelled] == tags
        firsts = {w: i for i, w in reversed(list(enumerate(word_ids))) if w is not None}
        assert all(encoded["labels"][row][firsts[w]] == tags[w] for w in firsts)


def test_a_sentence_whose_labels_do_not_fit_its_words_is_refused():
    """Three words with five labels would drop two labels silently, five words with three would fail on an index:
    both are refused, naming the sentence (its id) and the two counts."""
    words = [["Paris", "is", "far"], ["Bob", "went", "to", "New", "York"]]
    tokenizer = train_tokenizer([" ".join(w) for w in words] * 3, vocab_size=200, min_frequency=1)
    for tags, message in (
        ([[5, 0, 0, 0, 0], [1, 0, 0, 5, 6]], "sentence 7: 3 words .tokens. and 5 labels .ner_tags."),
        ([[5, 0, 0], [1, 0, 0]], "sentence 8: 5 words .tokens. and 3 labels .ner_tags."),
    ):
        examples = {"id": ["7", "8"], "tokens": words, "ner_tags": tags}
        with pytest.raises(NerDataError, match=message):
            tokenize_and_align_labels(examples, tokenizer)
    with pytest.raises(NerDataError, match="sentence 1: 5 words"):  # without ids: the sentence's position
        tokenize_and_align_labels({"tokens": words, "ner_tags": [[5, 0, 0], [1, 0, 0]]}, tokenizer)


def test_unreadable_files_name_file_and_line(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("Alice B-PER\nM\u00fcnchen B-LOC\n".encode("latin-1"))
    with pytest.raises(NerDataError, match=r"latin1\.txt, line 2: not UTF-8 text \(byte 0xfc at column 2\)"):
        read_conll(tmp_path / "latin1.txt")
    whole = gzip.compress("".join(f"w{i} O\n\n" for i in range(5000)).encode())
    (tmp_path / "iob2").mkdir()
    for name in ("train.txt.gz", "valid.txt.gz", "test.txt.gz"):
        (tmp_path / "iob2" / name).write_bytes(whole)
    (tmp_path / "iob2" / "valid.txt.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(NerDataError, match=r"valid\.txt\.gz, line \d+: cannot be read \(truncated gzip data"):
        load_conll03(tmp_path, scheme="iob2")


def test_byte_order_mark_is_dropped(tmp_path):
    for first in ("-DOCSTART- -X- O\n\n", ""):
        data = read_conll(_write(tmp_path / "bom.txt", f"\ufeff{first}Alice B-PER\nsaw O\n"))
        assert data["tokens"] == [["Alice", "saw"]]


def test_tags_in_the_other_scheme_are_converted_with_a_warning(tmp_path, caplog):
    iob1 = "Alice I-PER\nBob I-PER\nCarol B-PER\nin O\nBerlin I-LOC\nsaw O\n\nParis I-LOC\n"
    iob2 = "Alice B-PER\nBob I-PER\nCarol B-PER\nin O\nBerlin B-LOC\nsaw O\n\nParis B-LOC\n"
    (tmp_path / "iob2").mkdir()
    for name in ("train.txt", "valid.txt", "test.txt"):
        _write(tmp_path / "iob2" / name, iob1)  # IOB1 files where IOB2 ones are expected
    with caplog.at_level(logging.WARNING, logger="elc_bert.data.ner"):
        data = load_conll03(tmp_path, scheme="iob2")
    names = data["train"].features["ner_tags"].feature.names
    assert [[names[i] for i in s] for s in data["validation"]["ner_tags"]] == [
        ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "O"],
        ["B-LOC"],
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert any("valid.txt: 3 entities start with I- (IOB1 tags), the first at line 1" in m for m in messages)
    assert any("converted to IOB2" in m for m in messages)
    gold = [[names[i] for i in s] for s in data["test"]["ner_tags"]]
    assert sum(map(len, Entities(gold, IOB2).entities)) == 4  # the strict IOB2 scorer sees every entity

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elc_bert.data.ner"):
        data = read_conll(_write(tmp_path / "two.txt", iob2), label_names=CONLL03_LABELS, scheme="IOB1")
    assert [[CONLL03_LABELS[i] for i in s] for s in data["ner_tags"]] == [
        ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "O"],
        ["I-LOC"],
    ]
    assert "two.txt: 3 entities start with B- after O or another type (IOB2 tags), the first at line 1" in (
        caplog.records[0].getMessage()
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elc_bert.data.ner"):
        read_conll(_write(tmp_path / "same.txt", iob2), scheme="IOB2")
    assert not caplog.records  # a file in the scheme asked for is read as it is
    for tags in ([t.split()[1] for t in iob1.split("\n") if t], ["I-PER", "I-ORG", "B-ORG", "O", "I-PER"]):
        assert convert_scheme(convert_scheme(tags, "IOB2"), "IOB1") == convert_scheme(tags, "IOB1")
        assert convert_scheme(tags, "IOB2") == iob1_to_iob2(tags)

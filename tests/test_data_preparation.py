"""BabyLM corpus preparation: each source's cleaning rule and the normalisation against outputs written by hand from
the reference's rules (`ltgoslo/elc-bert`, preprocess/), segmentation with [PAR] marks, `elc-bert prepare-corpus` end
to end on the staged BabyLM files, the words seen, and bad input."""

import gzip
import json
import logging
from pathlib import Path

import pytest

from elc_bert.data import preparation
from elc_bert.data.corpus import document_dataset, packed_samples
from elc_bert.data.preparation import (
    BABYLM_SOURCES,
    MANIFEST,
    _attached_clitics,
    _balanced_quotes,
    _spaced_punctuation,
    prepare_corpus,
    prepared_lines,
    segmented,
    source_of,
)
from elc_bert.data.pretraining_batches import sample_words
from elc_bert.data.text import corpus_files, read_lines
from elc_bert.data.tokenizer import train_tokenizer
from elc_bert.models.errors import InputError, InputExistsError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "babylm"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not beside the repository")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("end.Next", "end. Next"),  # a full stop before a capital
        ("end.next", "end.next"),  # ... not before a small letter (an abbreviation, a file name)
        ("what?Yes", "what? Yes"),
        ("wait...what", "wait... what"),
        ("one,two", "one, two"),
        ("1,000", "1,000"),
        ("a;b", "a; b"),
        ("at 10:30", "at 10:30"),
        ("note:it", "note: it"),
        ("( yes )", "(yes)"),
        ("word . word , word ?", "word. word, word?"),
        ("$ 5 and 50 %", "$5 and 50%"),
        ("  many   spaces ", "many spaces"),
    ],
)
def test_spacing_around_punctuation(text, expected):
    assert _spaced_punctuation(text) == expected


def test_clitics_and_quotes():
    assert _attached_clitics("do n't go , it 's ok . I 'M HERE") == "don't go , it's ok . I'M HERE"
    assert _attached_clitics("they 've,we 'd.") == "they've,we'd."
    assert _balanced_quotes('he said "hi"to me') == 'he said "hi" to me'
    assert _balanced_quotes('x"y"z') == 'x "y" z'
    assert _balanced_quotes('a " b " c " d') == 'a " b " c " d'  # an odd count: left alone
    assert _balanced_quotes('said " hi "and') == 'said " hi "and'  # three changes of two quotes: too many, undone


CLEANING = {
    "aochildes": (["hi .", "hi .", "do n't touch it ."], ['"Hi."', '"Don\'t touch it."']),
    "bnc_spoken": (["yeah .", ".", "", "yeah .", "yeah ."], ['"Yeah."', "", '"Yeah."']),
    "cbt": (
        ["-LRB- a -RRB- `` Hello , '' he said .", "", "It 's -LSB- b -RSB- ."],
        ['(a) "Hello," he said.', "", "It's [b]."],
    ),
    "children_stories": (
        ["Title", "", "    Once upon  a time.", "There was.", "", "The end.", "Again."],
        ["Title", "[TAB] Once upon a time.", "There was.", "", "The end.", "Again."],
    ),
    "gutenberg": (
        ["The cat", "sat.", "", "", "Chapter 2", "", "It ran."],
        ["The cat sat.", "", "Chapter 2", "It ran."],
    ),
    "open_subtitles": (
        ["- Hello there.", "- Hello there.", "", "", "JOHN:", "(laughs)", '"Quoted"', "Bye"],
        ['"Hello there."', "", "JOHN:", "(laughs)", '"Quoted"', '"Bye"'],
    ),
    # ftfy decodes HTML entities first, unless the line holds a literal < or >: then markup in entities is dropped
    "qed": (
        ["-Tom &amp;amp; Jerry", "x &lt;i&gt; <br>", "&lt;i&gt;y&lt;/i&gt;", "a -> b", "12:", "Hi"],
        ['"Tom & Jerry"', '"<i>y</i>"', '"Hi"'],
    ),
    "simple_wikipedia": (
        [
            "Paris",
            "Paris is the capital[1] of France.",
            "",
            "Hombourg",
            "Hombourg is a commune found in France.",
            "",
            "Tree",
            "A tree &amp; a plant.",
        ],
        ["Paris", "Paris is the capital of France.", "", "Tree", "A tree & a plant."],
    ),
    "switchboard": (["- Yeah.", "Yeah.", "", "Yeah.", "B: Uh-huh."], ['"Yeah."', "", '"B: Uh-huh."']),
    "wikipedia": (
        [
            "= = = Apollo = = =",
            "Apollo was a [[Greek god|god]][2].",
            "[[Category:Gods]]",
            "",
            "= = = Zeus = = =",
            "Zeus.",
        ],
        ["Apollo", "Apollo was a Greek god.", "", "Zeus", "Zeus."],
    ),
}


@pytest.mark.parametrize("source", sorted(CLEANING))
def test_each_source_cleaned_as_the_reference_cleans_it(source):
    lines, expected = CLEANING[source]
    assert list(BABYLM_SOURCES[source].clean(iter(lines))) == expected


def test_sources_recognised_by_their_release_names():
    assert {name for name in BABYLM_SOURCES} >= set(CLEANING) and len(CLEANING) == 10
    assert source_of("train_10M/aochildes.train").name == "aochildes"  # 2023
    assert source_of("childes.train.gz").name == "childes"  # 2024 / 2025
    assert source_of("simple_wiki.dev").name == source_of("simple_wikipedia.test.gz").name == "simple_wikipedia"
    assert list(BABYLM_SOURCES["childes"].clean(["hi ."])) == ['"hi."']  # the 2024 script does not capitalise
    for other in ("wiki.train.txt", "switchboard.txt", "notes.train", "aochildes"):
        assert source_of(other) is None


def test_segmentation_marks_paragraph_ends():
    lines = ["Mr. Smith came home. He left at 5 p.m. on Monday.", "", "One.", "  "]
    assert list(segmented(lines)) == ["Mr. Smith came home.", "He left at 5 p.m. on Monday.[PAR]", "", "One.[PAR]", ""]


def test_plain_text_is_segmented_only_with_a_warning(tmp_path, caplog):
    text = tmp_path / "notes.txt"
    text.write_text("Hello world .  It 's me.\n\nBye.\n")
    with caplog.at_level(logging.WARNING, logger="elc_bert"):
        assert list(prepared_lines(text)) == ["Hello world .", "It 's me.[PAR]", "", "Bye.[PAR]"]
    assert str(text) in caplog.text and "plain text" in caplog.text


@pytest.mark.slow
@needs_shared
def test_prepare_corpus_end_to_end_on_the_staged_files(tmp_path):
    """The staged 2024 Switchboard file and the 2023 files' first lines, prepared: line counts, words, paragraph
    marks and documents as the rules give them, a manifest of the inputs, and a second call that keeps the folder."""
    staged = tmp_path / "babylm"
    staged.mkdir()
    for name in ("aochildes", "cbt", "children_stories", "switchboard"):
        lines = read_lines(SHARED / "2023" / "train_10M" / f"{name}.train.gz")[:3000]
        with gzip.open(staged / f"{name}.train.gz", "wt", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    out = tmp_path / "prepared"
    prepared = {entry.output: entry for entry in prepare_corpus([staged], out, progress=False)}
    assert sorted(path.name for path in out.iterdir()) == sorted([MANIFEST, *prepared])
    for name, entry in prepared.items():
        raw = read_lines(staged / f"{name}.gz")
        text = read_lines(out / name)
        assert entry.lines == len(raw) == 3000 and entry.words == sum(len(line.split()) for line in raw)
        assert entry.sentences == sum(1 for line in text if line) and entry.source == name.split(".")[0]
        assert entry.paragraphs == sum(line.endswith("[PAR]") for line in text)
        assert "[PAR]" not in "".join(raw) and all(line.count("[PAR]") <= 1 for line in text)
    # each utterance of the spoken sources is a paragraph (less the repeats dropped); the stories keep their blocks
    assert 2900 < prepared["aochildes.train"].paragraphs < 3000 and prepared["aochildes.train"].documents == 1
    assert prepared["children_stories.train"].documents > 50
    # each Switchboard turn is quoted, then split into its sentences
    turns = [turn.strip() for turn in "\n".join(read_lines(out / "switchboard.train")).split("[PAR]")]
    assert all(turn.startswith('"') and turn.endswith('"') for turn in turns if turn)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["files"]["cbt.train"]["words"] == prepared["cbt.train"].words
    before = {path.name: path.stat().st_mtime_ns for path in out.iterdir()}
    again = prepare_corpus([staged], out, progress=False)  # the same inputs: nothing is written again
    assert {entry.output for entry in again} == set(prepared)
    assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == before
    # the whole 2024 Switchboard file
    switchboard = prepare_corpus([SHARED / "2024" / "train_10M"], tmp_path / "sw24", progress=False)[0]
    assert switchboard.lines == 18_000 and switchboard.words == 146_789 and switchboard.documents == 1


def test_words_seen_equal_on_raw_and_prepared_text(tmp_path):
    """One epoch of samples counts the words of the text as released, raw or prepared (by the job or by
    prepare-corpus), though preparation splits, joins, quotes and drops lines."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "aochildes.train").write_text("hi .\nhi .\nwhere 's the ball ?\nthere it is . look !\n")
    (folder / "gutenberg.train").write_text("The cat\nsat on\nthe mat.\n\n\nChapter 2\n\nIt ran. It hid.\n")
    (folder / "notes.train").write_text("Plain text , as it is.\n\nMore of it.\n")
    words = sum(len(line.split()) for path in folder.iterdir() for line in read_lines(path))
    tokenizer = train_tokenizer(["hi where the ball there it is look cat sat mat chapter ran hid"] * 20, 300, 1)
    prepare_corpus([folder], tmp_path / "prepared", progress=False)
    counted = {}
    for name, source, prepare in (("raw", folder, False), ("job", folder, True), ("folder", tmp_path / "prepared", 0)):
        documents = document_dataset(source, cache_dir=tmp_path / "cache", prepare=bool(prepare))
        for length in (8, 64):
            counted[name, length] = int(
                sample_words(packed_samples(documents, tokenizer, length, progress=False)).sum()
            )
    assert set(counted.values()) == {words} and words == 36
    # the prepared text itself has other words (quotes joined, repeats dropped, paragraphs joined)
    prepared_words = sum(len(line.split()) for path in corpus_files(tmp_path / "prepared") for line in read_lines(path))
    assert prepared_words != words


@pytest.mark.parametrize("prepare", [False, True])
def test_step_words_of_whole_epochs_are_the_corpus_words(tmp_path, prepare):
    """`pretrain.step_words` (what a run's steps show, built without training, for `prepared_vs_raw.py
    --words-seen`): steps covering the samples exactly twice show the words of the text as released twice, raw or
    prepared; the tokenizer is trained in the folder given."""
    from elc_bert.data.tokenizer import load_tokenizer
    from elc_bert.job_configs import PretrainConfig
    from elc_bert.training.pretrain import step_words

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "aochildes.train").write_text("hi .\nhi .\nwhere 's the ball ?\nthere it is . look !\n" * 5)
    (folder / "gutenberg.train").write_text("The cat\nsat on\nthe mat.\n\n\nChapter 2\n\nIt ran. It hid.\n" * 5)
    words = sum(len(line.split()) for path in folder.iterdir() for line in read_lines(path))
    options = dict(data_dir=str(tmp_path), train_files=["corpus"], prepare_corpus=prepare, seq_length=16)
    options.update(preset="tiny", vocab_size=300, min_frequency=1, batch_size=1, data_cache_dir=str(tmp_path / "cache"))
    first = step_words(PretrainConfig(output_dir="unused", max_steps=1, **options), tmp_path / "run")
    assert len(first) == 1 and (tmp_path / "run" / "tokenizer").is_dir()
    documents = document_dataset(folder, cache_dir=tmp_path / "cache", prepare=prepare)
    samples = len(packed_samples(documents, load_tokenizer(tmp_path / "run" / "tokenizer"), 16, progress=False))
    assert samples > 4
    seen = step_words(PretrainConfig(output_dir="unused", max_steps=2 * samples, **options), tmp_path / "run")
    assert len(seen) == 2 * samples and sum(seen) == 2 * words


def test_bad_input(tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "cbt.train").write_text("Fine .\n")
    (folder / "switchboard.train").write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"switchboard.train, line 2: not UTF-8"):
        prepare_corpus([folder], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    (folder / "switchboard.train").write_text("Fine too .\n")

    # a killed preparation leaves no folder that reads as a corpus; the next one starts over
    calls = []
    original = preparation._prepare_file

    def killed(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args)

    monkeypatch.setattr(preparation, "_prepare_file", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus([folder], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists() and (tmp_path / "out.partial").is_dir()
    monkeypatch.undo()
    prepare_corpus([folder], tmp_path / "out", progress=False)
    assert not (tmp_path / "out.partial").exists() and len(corpus_files(tmp_path / "out")) == 2

    # an output folder holding another corpus, or anything else, is refused and left as it is
    (folder / "cbt.train").write_text("Changed .\n")
    with pytest.raises(InputExistsError, match="holds another corpus"):
        prepare_corpus([folder], tmp_path / "out", progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(InputExistsError, match="not a prepared corpus"):
        prepare_corpus([folder], tmp_path / "other", progress=False)
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    with pytest.raises(InputError, match="would both be prepared as cbt.train"):
        prepare_corpus([folder, folder / "cbt.train"], tmp_path / "twice", progress=False)
    with pytest.raises(InputError, match="would be inside its input"):
        prepare_corpus([folder], folder / "prepared", progress=False)


def test_the_command_prints_its_table_and_names_bad_input(tmp_path, capsys):
    from elc_bert.cli import main

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "cbt.train").write_text("It 's here .\n\nAnd there .\n")
    main(["prepare-corpus", str(folder), "--out", str(tmp_path / "out")])
    table = capsys.readouterr().out
    assert "| cbt.train | cbt | 3 | 7 | 2 | 2 | 2 |" in table
    assert read_lines(tmp_path / "out" / "cbt.train") == ["It's here.[PAR]", "", "And there.[PAR]"]
    (folder / "qed.train").write_bytes(b"ok\n\xfe\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare-corpus", str(folder), "--out", str(tmp_path / "out2")])
    assert exit_info.value.code == 2 and "qed.train, line 2" in capsys.readouterr().err


def test_pretraining_on_prepared_text(tmp_path):
    """`prepare_corpus: true`: the job trains on the prepared text ([PAR] in its samples, its tokenizer trained on
    it), every token reaches a sample, and the words-seen milestones count the text as released."""
    from transformers import AutoTokenizer

    from elc_bert.training.pretrain import PretrainConfig, pretrain

    sample = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"
    (tmp_path / "switchboard.train").write_text(
        "\n".join(f"- {line.strip()}" for line in read_lines(sample)[:400] if line.strip()) + "\n"
    )
    config = PretrainConfig(
        output_dir=str(tmp_path / "run"),
        data_dir=str(tmp_path),
        train_files=["switchboard.train"],
        prepare_corpus=True,
        preset="tiny",
        vocab_size=600,
        min_frequency=2,
        seq_length=32,
        max_steps=4,
        batch_size=8,
        checkpoint_words=[200],
        training={"save_steps": 100},
    )
    metrics = pretrain(config)
    assert metrics["corpus_token_share"] == 1.0 and metrics["repeated_token_share"] > 0
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run")
    documents = document_dataset(tmp_path / "switchboard.train", prepare=True, cache_dir=tmp_path / "cache")
    samples = packed_samples(documents, tokenizer, 32, progress=False)
    assert sum(ids.count(tokenizer.convert_tokens_to_ids("[PAR]")) for ids in samples["input_ids"]) > 100
    seen = json.loads((tmp_path / "run" / "words-200" / "words_seen.json").read_text())
    words = sum(len(line.split()) for line in read_lines(tmp_path / "switchboard.train"))
    assert 200 <= seen["words"] < 400 < words  # about 12 words of the text as released per sample of 32 tokens


def _spaced_punctuation_by_list_edits(text: str) -> str:
    """`_spaced_punctuation` as it was written first, editing a list of the characters in place from the end back
    (quadratic in a long line): the reference for the linear one."""

    def space_after(chars, i):
        mark, following = chars[i], chars[i + 1]
        opens = following in "‘([{"
        if mark == "." and (following.isupper() or opens):
            return True
        if mark in "?!…’" and (following.isalnum() or opens):
            return True
        if mark == "." and i > 2 and chars[i - 1] == chars[i - 2] == "." and following != " ":
            return True
        if mark == "," and (following.isalpha() or opens):
            return True
        if mark in ";)]}%" and (following.isalnum() or opens):
            return True
        if mark == ":":
            between_digits = following.isnumeric() and i > 0 and chars[i - 1].isnumeric()
            return opens or (following.isalnum() and not between_digits)
        return False

    chars = list(" ".join(text.split()))
    for i in range(len(chars) - 2, -1, -1):
        following = chars[i + 1]
        before = chars[i - 1] if i > 0 else ""
        if space_after(chars, i):
            chars.insert(i + 1, " ")
        elif chars[i] in "([{" and following == " ":
            del chars[i + 1]
        elif chars[i] == " " and (
            following in ".;:?!…,’)]}"
            or (before and before in "$£€" and following.isnumeric())
            or (before.isnumeric() and following == "%")
        ):
            del chars[i]
    return "".join(chars)


def _balanced_quotes_by_list_edits(text: str) -> str:
    """`_balanced_quotes` as it was written first, inserting into and deleting from a list of the characters."""
    count = text.count('"')
    if count == 0 or count % 2 or '""' in text or '" "' in text:
        return text
    chars, i, opening, changes = list(text), 0, True, 0
    while i < len(chars):
        if chars[i] != '"':
            i += 1
            continue
        if opening:
            if i > 0 and chars[i - 1] != " ":
                chars.insert(i, " ")
                i += 1
                changes += 1
            if i + 1 < len(chars) and chars[i + 1] == " ":
                del chars[i + 1]
                changes += 1
        else:
            if i > 0 and chars[i - 1] == " ":
                del chars[i - 1]
                i -= 1
                changes += 1
            if i + 1 < len(chars) and chars[i + 1].isalnum():
                chars.insert(i + 1, " ")
                changes += 1
        opening = not opening
        i += 1
    if changes > 2 and changes > count * 2 / 3:
        return text
    return "".join(chars)


TRICKY = [
    "",
    ".",
    "...x",  # an ellipsis at the very start: no space (the reference's rule looks 3 characters back)
    "a...x...y....Z",
    "( [ { x } ] )",
    "(.X",
    "$ 5 , £ 10 and € 3 . 50 % .",
    "10 : 30 , a:b , 1:x",
    "end.Next?Yes!no…and’s",
    " . , ; : ? ! …",
    'he said " hi "to " you ".',
    '"a" "b"c "d"',
    '"" "x"',
    "x ( . ) [ , ] { ; }",
]


@pytest.mark.parametrize("text", TRICKY)
def test_punctuation_and_quotes_as_the_list_editing_rules_give_them(text):
    """The spacing and quote rules read a long line once (they were quadratic in its length: a 1 MB line of CBT took
    seconds): their text is still the first version's, on tricky text and on random strings of the characters they
    act on."""
    assert _spaced_punctuation(text) == _spaced_punctuation_by_list_edits(text)
    assert _balanced_quotes(text) == _balanced_quotes_by_list_edits(text)


def test_punctuation_and_quotes_on_random_text_as_the_list_editing_rules_give_them():
    import random

    rng = random.Random(0)
    characters = list('aZ9 .,;:?!…’)]}%([{$£€"\t') + ["..."]
    for _ in range(3000):
        text = "".join(rng.choice(characters) for _ in range(rng.randint(1, 16)))
        assert _spaced_punctuation(text) == _spaced_punctuation_by_list_edits(text), text
        assert _balanced_quotes(text) == _balanced_quotes_by_list_edits(text), text
    quotes = list('"""  ab.A1')  # pairs of quotes that get tightened (the rule gives up on most other texts)
    texts = ["".join(rng.choice(quotes) for _ in range(rng.randint(2, 12))) for _ in range(3000)]
    assert sum(_balanced_quotes(text) != text for text in texts) > 100
    for text in texts:
        assert _balanced_quotes(text) == _balanced_quotes_by_list_edits(text), text


def test_a_prepared_folder_is_not_prepared_again(tmp_path, caplog):
    """`prepare_corpus: true` on a folder that prepare-corpus wrote reads it as it is, with a warning naming it
    (prepared twice, its quotes were doubled and [PAR] marks landed inside sentences); raw files beside it are
    still prepared, and the words are the text's as released either way."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "aochildes.train").write_text("do n't go .\nyes , it 's me ! who ?\n")
    prepared = tmp_path / "prepared"
    prepare_corpus([folder], prepared, progress=False)
    as_is = document_dataset(prepared, cache_dir=tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="elc_bert"):
        again = document_dataset(prepared, cache_dir=tmp_path / "cache", prepare=True)
    assert again["sentences"] == as_is["sentences"] == [['"Don\'t go."[PAR]', "\"Yes, it's me!", 'who?"[PAR]']]
    assert again["words"] == as_is["words"] == [12]
    assert f"{prepared}: already prepared by prepare-corpus" in caplog.text
    raw = tmp_path / "raw" / "aochildes.train"
    raw.parent.mkdir()
    raw.write_text("fine .\n")
    both = document_dataset([prepared, raw], cache_dir=tmp_path / "cache", prepare=True)
    assert both["sentences"][-1] == ['"Fine."[PAR]'] and both["words"] == [12, 2]


def test_a_broken_link_in_an_input_folder_is_refused(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "cbt.train").write_text("Fine .\n")
    (folder / "switchboard.train.gz").symlink_to(tmp_path / "moved" / "switchboard.train.gz")
    with pytest.raises(InputError, match=r"switchboard.train.gz: a broken symbolic link \(to .*moved"):
        prepare_corpus([folder], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
    (folder / "switchboard.train.gz").unlink()
    (folder / "train_100M").symlink_to(tmp_path / "elsewhere")  # a folder of corpus files, perhaps
    with pytest.raises(InputError, match="train_100M: a broken symbolic link"):
        prepare_corpus([folder], tmp_path / "out", progress=False)
    with pytest.raises(InputError, match="a broken symbolic link"):
        prepare_corpus([folder / "train_100M"], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_linked_folder_in_an_input_folder_is_prepared(tmp_path, caplog):
    """`prepare-corpus FOLDER` reads a linked sub-folder as the user sees it (Python 3.11's `Path.rglob` skipped it
    without a word), its files under the link's name; a link cycle is skipped with a warning."""
    folder, elsewhere = tmp_path / "corpus", tmp_path / "disk" / "dev"
    folder.mkdir()
    elsewhere.mkdir(parents=True)
    (folder / "cbt.train").write_text("It 's here .\n")
    (elsewhere / "cbt.dev").write_text("It 's there .\n")
    (folder / "dev").symlink_to(elsewhere)
    (elsewhere / "back").symlink_to(folder)
    with caplog.at_level(logging.WARNING):
        prepared = prepare_corpus([folder], tmp_path / "out", progress=False)
    assert [entry.output for entry in prepared] == ["cbt.train", "dev/cbt.dev"]
    assert read_lines(tmp_path / "out" / "dev" / "cbt.dev") == ["It's there.[PAR]"]
    assert f"{folder / 'dev' / 'back'}: skipped, a link to the folder {folder}, searched already" in caplog.text


def test_the_output_folder_may_be_a_link(tmp_path):
    """`--out LINK`: the corpus is written in the link's target (renaming onto the link failed and left the corpus
    in LINK.partial); a file where the folder should be is refused before any work."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "cbt.train").write_text("It 's here .\n")
    (tmp_path / "disk").mkdir()
    (tmp_path / "disk" / "prepared").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "disk" / "prepared")
    prepare_corpus([folder], tmp_path / "link", progress=False)
    assert (tmp_path / "link").is_symlink() and read_lines(tmp_path / "link" / "cbt.train") == ["It's here.[PAR]"]
    assert sorted(path.name for path in tmp_path.iterdir() if path.suffix == ".partial") == []
    assert sorted(path.name for path in (tmp_path / "disk").iterdir() if path.suffix == ".partial") == []
    assert prepare_corpus([folder], tmp_path / "link", progress=False)[0].words == 4  # kept as it is
    (tmp_path / "dangling").symlink_to(tmp_path / "disk" / "later")  # a link to a folder not made yet
    prepare_corpus([folder], tmp_path / "dangling", progress=False)
    assert (tmp_path / "dangling").is_symlink() and (tmp_path / "disk" / "later" / MANIFEST).is_file()
    (tmp_path / "file").write_text("mine")
    with pytest.raises(InputExistsError, match="file is a file, not a folder"):
        prepare_corpus([folder], tmp_path / "file", progress=False)
    assert (tmp_path / "file").read_text() == "mine" and not (tmp_path / "file.partial").exists()

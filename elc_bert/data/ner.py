"""Named-entity recognition data: CoNLL-03 (IOB1 and IOB2 files) and WikiAnn (Rahimi and XTREME PAN-X layouts).

Everything lands in `datasets` objects whose `ner_tags` are a sequence of `ClassLabel`. Malformed input raises
`NerDataError` naming the file and the line; tags in the other scheme (IOB1 in a file read as IOB2, or the reverse) are
converted to the scheme asked for, with a warning naming the file.
"""

import itertools
import logging
from pathlib import Path

import numpy as np

from ..extras import needs
from ..models.errors import InputError
from .text import numbered_lines

with needs("data", "NER data (elc_bert.data.ner)"):
    import datasets

CONLL03_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
WIKIANN_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
# The seqeval scheme each source's tags follow.
SCHEMES = {"conll03-iob1": "IOB1", "conll03-iob2": "IOB2", "wikiann": "IOB2"}


logger = logging.getLogger(__name__)


class NerDataError(InputError):
    """Malformed NER data; the message names the file and the line."""


def convert_scheme(tags: list[str], scheme: str) -> list[str]:
    """The tags of one sentence in `scheme`: "IOB2", where every entity starts with B-, or "IOB1", where an entity
    starts with I- unless it directly follows one of the same type (then B-). Tags already in `scheme` are kept; an
    I- tag that does not continue an entity of its type starts one (as the conlleval rules read it)."""
    if scheme not in ("IOB1", "IOB2"):
        raise InputError(f"scheme must be 'IOB1' or 'IOB2', got {scheme!r}")
    converted, previous = [], "O"
    for tag in tags:
        prefix, _, kind = tag.partition("-")
        if prefix in ("B", "I") and kind:
            same = previous[2:] == kind  # the previous token is of this type (previous[2:] is "" after O)
            starts = prefix == "B" or not same
            if scheme == "IOB2":
                tag = ("B-" if starts else "I-") + kind
            else:
                tag = ("B-" if starts and same else "I-") + kind
        converted.append(tag)
        previous = tag
    return converted


def _find(path: Path) -> Path:
    """`path` itself or its `.gz` twin."""
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise NerDataError(f"{path}: missing split file (looked for {path.name} and {path.name}.gz)")


def read_conll(
    path,
    *,
    tag_column: int | None = -1,
    label_names: list[str] | None = None,
    token_prefix: str = "",
    scheme: str | None = None,
):
    """One CoNLL-style file (UTF-8, gzip when the name ends in .gz): a token per line in whitespace-separated columns,
    blank lines between sentences, `-DOCSTART-` lines skipped. `label_names` fixes the tag set and order (an unknown
    tag is an error); without it, the tags seen, sorted with "O" first. A column of tags may be absent altogether
    (`tag_column=None`: tokens only). `token_prefix` is stripped from tokens that start with it (WikiAnn's "en:").
    `scheme` ("IOB1" or "IOB2") is the tag scheme to return: tags in the other one are converted (`convert_scheme`)
    with a warning that names the file. A file that cannot be read raises NerDataError naming the file and line."""
    path = Path(path)
    sentences, tags, lines, current_tokens, current_tags, current_lines = [], [], [], [], [], []
    columns = None
    try:
        numbered = numbered_lines(path)
    except ValueError as error:  # not UTF-8, truncated or corrupt gzip data
        raise NerDataError(str(error)) from None
    for number, line in itertools.chain(numbered, [(0, "")]):  # a blank line after the last ends its sentence
        fields = line.split()
        if not fields:
            if current_tokens:
                sentences.append(current_tokens)
                tags.append(current_tags)
                lines.append(current_lines)
                current_tokens, current_tags, current_lines = [], [], []
            continue
        if fields[0] == "-DOCSTART-":
            continue
        columns = columns or len(fields)
        if len(fields) != columns:
            raise NerDataError(f"{path}, line {number}: {len(fields)} columns, expected {columns}")
        current_tokens.append(fields[0].removeprefix(token_prefix))
        current_lines.append(number)
        if tag_column is not None:
            tag = fields[tag_column]
            if label_names is not None and tag not in label_names:
                raise NerDataError(f"{path}, line {number}: unknown tag {tag!r} (known: {label_names})")
            current_tags.append(tag)
    if not sentences:
        raise NerDataError(f"{path}: no sentences (empty file)")
    if tag_column is not None and scheme is not None:
        tags = _in_scheme(path, tags, lines, scheme)
    data = {"id": [str(i) for i in range(len(sentences))], "tokens": sentences}
    features = {"id": datasets.Value("string"), "tokens": datasets.Sequence(datasets.Value("string"))}
    if tag_column is not None:
        seen = {tag for sentence in tags for tag in sentence}
        label_names = ["O"] + sorted(seen - {"O"}) if label_names is None else label_names
        index = {name: i for i, name in enumerate(label_names)}
        unknown = seen - index.keys()
        if unknown:  # a converted tag outside a fixed tag set
            raise NerDataError(f"{path}: tags {sorted(unknown)} (in {scheme}) are not among {label_names}")
        data["ner_tags"] = [[index[tag] for tag in sentence] for sentence in tags]
        features["ner_tags"] = datasets.Sequence(datasets.ClassLabel(names=label_names))
    return datasets.Dataset.from_dict(data, features=datasets.Features(features))


def _in_scheme(path: Path, tags: list[list[str]], lines: list[list[int]], scheme: str) -> list[list[str]]:
    """The sentences' tags in `scheme`, with a warning naming the file (and the first line changed) when some were
    in the other scheme."""
    converted = [convert_scheme(sentence, scheme) for sentence in tags]
    changed = [
        line
        for before, after, numbers in zip(tags, converted, lines)
        for old, new, line in zip(before, after, numbers)
        if old != new
    ]
    if changed:
        start = "I- (IOB1 tags)" if scheme == "IOB2" else "B- after O or another type (IOB2 tags)"
        logger.warning(
            "%s: %d entities start with %s, the first at line %d; converted to %s, the scheme the file is read in",
            path,
            len(changed),
            start,
            changed[0],
            scheme,
        )
    return converted


def load_conll03(data_dir, *, scheme: str = "iob2") -> datasets.DatasetDict:
    """CoNLL-03 English from the `conll2003` folder: `original_iob1/eng.{train,testa,testb}` (scheme "iob1") or
    `iob2/{train,valid,test}.txt` (scheme "iob2"), plain or gzip. Evaluate with seqeval's matching scheme
    (`SCHEMES["conll03-" + scheme]`)."""
    data_dir = Path(data_dir)
    names = {
        "iob1": ("original_iob1", "eng.train", "eng.testa", "eng.testb"),
        "iob2": ("iob2", "train.txt", "valid.txt", "test.txt"),
    }
    if scheme not in names:
        raise InputError(f"scheme must be 'iob1' or 'iob2', got {scheme!r}")
    folder, *files = names[scheme]
    return datasets.DatasetDict(
        {
            split: read_conll(
                _find(data_dir / folder / name), label_names=CONLL03_LABELS, scheme=SCHEMES[f"conll03-{scheme}"]
            )
            for split, name in zip(("train", "validation", "test"), files)
        }
    )


def load_wikiann(data_dir, language: str, *, layout: str = "rahimi") -> datasets.DatasetDict:
    """WikiAnn for one language from the `wikiann` folder. "rahimi": `rahimi/<lang>/{train,dev,test}` with the
    `<lang>:` token prefix stripped; "xtreme": `xtreme_panx/{train,dev,test}-<lang>.tsv`, whose test split has
    tokens only (no `ner_tags` column)."""
    data_dir = Path(data_dir)
    if layout == "rahimi":
        paths = {split: data_dir / "rahimi" / language / name for split, name in _SPLIT_NAMES}
        prefix = f"{language}:"
    elif layout == "xtreme":
        paths = {split: data_dir / "xtreme_panx" / f"{name}-{language}.tsv" for split, name in _SPLIT_NAMES}
        prefix = ""
    else:
        raise InputError(f"layout must be 'rahimi' or 'xtreme', got {layout!r}")
    splits = {}
    for split, path in paths.items():
        unlabelled = layout == "xtreme" and split == "test"
        splits[split] = read_conll(
            _find(path),
            tag_column=None if unlabelled else -1,
            label_names=None if unlabelled else WIKIANN_LABELS,
            token_prefix=prefix,
            scheme=SCHEMES["wikiann"],
        )
    return datasets.DatasetDict(splits)


_SPLIT_NAMES = (("train", "train"), ("validation", "dev"), ("test", "test"))


def load_ner_dataset(name_or_dir: str, dataset: str = "conll03", **kwargs) -> datasets.DatasetDict:
    """A local folder through the loaders above (`dataset` "conll03" or "wikiann"), else a Hub dataset name through
    `datasets.load_dataset(name_or_dir, **kwargs)` (e.g. "eriktks/conll2003", or "unimelb-nlp/wikiann" with the
    language as `name`)."""
    if Path(name_or_dir).is_dir():
        loader = {"conll03": load_conll03, "wikiann": load_wikiann}[dataset]
        return loader(name_or_dir, **kwargs)
    return datasets.load_dataset(name_or_dir, **kwargs)


def few_shot_sample(dataset: datasets.Dataset, n_per_class: int, num_classes: int, seed: int) -> datasets.Dataset:
    """N x C sentences drawn uniformly without replacement from the whole split (not stratified), per seed."""
    size = n_per_class * num_classes
    if size > len(dataset):
        raise InputError(f"asked for {size} sentences ({n_per_class} x {num_classes}), the split has {len(dataset)}")
    indices = np.random.default_rng(seed).choice(len(dataset), size=size, replace=False)
    return dataset.select(sorted(indices.tolist()))


def check_labels_fit_words(examples, where: str = "") -> None:
    """Raises NerDataError naming the first sentence of `examples` (columns "tokens" and "ner_tags"; by its "id"
    where there is one, else its position) whose number of labels is not its number of words: each word is labelled
    with the tag at its position, so extra labels would be dropped and missing ones fail. `where` (e.g. "train
    split") starts the message."""
    names = examples["id"] if "id" in examples else range(len(examples["tokens"]))
    for name, tokens, tags in zip(names, examples["tokens"], examples["ner_tags"]):
        if len(tokens) != len(tags):
            raise NerDataError(
                f"{where + ': ' if where else ''}sentence {name}: {len(tokens)} words (tokens) and {len(tags)} labels "
                "(ner_tags): each word needs one label"
            )


def tokenize_and_align_labels(
    examples, tokenizer, max_length: int | None = None, label_all_tokens: bool = False, word_index: bool = False
):
    """Batched `Dataset.map` function: tokenizes pre-split words (cut at `max_length` tokens) and labels the first
    sub-token of each word with the word's tag, every other sub-token and special token with -100. With
    `word_index`, also a column "word_index": the word of each labelled sub-token, in order (to score whole
    sentences, the words past the cut included). Labels that do not fit their words raise NerDataError
    (`check_labels_fit_words`)."""
    if "ner_tags" in examples:
        check_labels_fit_words(examples)
    encoded = tokenizer(
        examples["tokens"], is_split_into_words=True, truncation=max_length is not None, max_length=max_length
    )
    if "ner_tags" not in examples:
        return encoded
    labels, indices = [], []
    for row, tags in enumerate(examples["ner_tags"]):
        previous, row_labels, row_words = None, [], []
        for word in encoded.word_ids(row):
            if word is None or (word == previous and not label_all_tokens):
                row_labels.append(-100)
            else:
                row_labels.append(tags[word])
                row_words.append(word)
            previous = word
        labels.append(row_labels)
        indices.append(row_words)
    encoded["labels"] = labels
    if word_index:
        encoded["word_index"] = indices
    return encoded

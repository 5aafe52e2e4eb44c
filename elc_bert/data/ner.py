"""Named-entity recognition data: CoNLL-03 (IOB1 and IOB2 files) and WikiAnn (Rahimi and XTREME PAN-X layouts).

Everything lands in `datasets` objects whose `ner_tags` are a sequence of `ClassLabel`. Malformed input raises
`NerDataError` naming the file and the line.
"""

import gzip
from pathlib import Path

import datasets
import numpy as np

CONLL03_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
WIKIANN_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
# The seqeval scheme each source's tags follow.
SCHEMES = {"conll03-iob1": "IOB1", "conll03-iob2": "IOB2", "wikiann": "IOB2"}


class NerDataError(ValueError):
    """Malformed NER data; the message names the file and the line."""


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _find(path: Path) -> Path:
    """`path` itself or its `.gz` twin."""
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise NerDataError(f"{path}: missing split file (looked for {path.name} and {path.name}.gz)")


def read_conll(path, *, tag_column: int = -1, label_names: list[str] | None = None, token_prefix: str = ""):
    """One CoNLL-style file: a token per line in whitespace-separated columns, blank lines between sentences,
    `-DOCSTART-` lines skipped. `label_names` fixes the tag set and order (an unknown tag is an error); without it,
    the tags seen, sorted with "O" first. A column of tags may be absent altogether (`tag_column=None`: tokens only).
    `token_prefix` is stripped from tokens that start with it (WikiAnn's "en:")."""
    path = Path(path)
    sentences, tags, current_tokens, current_tags = [], [], [], []
    columns = None
    with _open(path) as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                if current_tokens:
                    sentences.append(current_tokens)
                    tags.append(current_tags)
                    current_tokens, current_tags = [], []
                continue
            if fields[0] == "-DOCSTART-":
                continue
            columns = columns or len(fields)
            if len(fields) != columns:
                raise NerDataError(f"{path}, line {number}: {len(fields)} columns, expected {columns}")
            token = fields[0]
            if token_prefix and token.startswith(token_prefix):
                token = token[len(token_prefix) :]
            current_tokens.append(token)
            if tag_column is not None:
                tag = fields[tag_column]
                if label_names is not None and tag not in label_names:
                    raise NerDataError(f"{path}, line {number}: unknown tag {tag!r} (known: {label_names})")
                current_tags.append(tag)
    if current_tokens:
        sentences.append(current_tokens)
        tags.append(current_tags)
    if not sentences:
        raise NerDataError(f"{path}: no sentences (empty file)")
    data = {"id": [str(i) for i in range(len(sentences))], "tokens": sentences}
    features = {"id": datasets.Value("string"), "tokens": datasets.Sequence(datasets.Value("string"))}
    if tag_column is not None:
        if label_names is None:
            seen = {tag for sentence in tags for tag in sentence}
            label_names = ["O"] + sorted(seen - {"O"})
        index = {name: i for i, name in enumerate(label_names)}
        data["ner_tags"] = [[index[tag] for tag in sentence] for sentence in tags]
        features["ner_tags"] = datasets.Sequence(datasets.ClassLabel(names=label_names))
    return datasets.Dataset.from_dict(data, features=datasets.Features(features))


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
        raise ValueError(f"scheme must be 'iob1' or 'iob2', got {scheme!r}")
    folder, *files = names[scheme]
    return datasets.DatasetDict(
        {
            split: read_conll(_find(data_dir / folder / name), label_names=CONLL03_LABELS)
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
        raise ValueError(f"layout must be 'rahimi' or 'xtreme', got {layout!r}")
    splits = {}
    for split, path in paths.items():
        unlabelled = layout == "xtreme" and split == "test"
        splits[split] = read_conll(
            _find(path),
            tag_column=None if unlabelled else -1,
            label_names=None if unlabelled else WIKIANN_LABELS,
            token_prefix=prefix,
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
        raise ValueError(f"asked for {size} sentences ({n_per_class} x {num_classes}), the split has {len(dataset)}")
    indices = np.random.default_rng(seed).choice(len(dataset), size=size, replace=False)
    return dataset.select(sorted(indices.tolist()))


def tokenize_and_align_labels(examples, tokenizer, max_length: int | None = None, label_all_tokens: bool = False):
    """Batched `Dataset.map` function: tokenizes pre-split words and labels the first sub-token of each word with
    the word's tag, every other sub-token and special token with -100."""
    encoded = tokenizer(
        examples["tokens"], is_split_into_words=True, truncation=max_length is not None, max_length=max_length
    )
    if "ner_tags" not in examples:
        return encoded
    labels = []
    for row, tags in enumerate(examples["ner_tags"]):
        previous, row_labels = None, []
        for word in encoded.word_ids(row):
            if word is None or (word == previous and not label_all_tokens):
                row_labels.append(-100)
            else:
                row_labels.append(tags[word])
            previous = word
        labels.append(row_labels)
    encoded["labels"] = labels
    return encoded

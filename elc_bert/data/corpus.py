"""Pretraining corpora through `datasets`: documents and packed samples, prepared once and then read from the cache.

`document_dataset` reads a corpus (local text files, BabyLM-style folders, or a `datasets` dataset) into one row per
document; `packed_samples` tokenizes and packs those documents into [CLS] ... [SEP] samples with a batched `map`. Both
results are Arrow files in the datasets cache, named by a fingerprint of everything they depend on, so a rerun or a
resumed run (a fresh process) finds them and starts at once. `streamed_samples` packs the same way from a streamed
dataset, for corpora too large to download first.
"""

import gzip
import json
import logging
import zlib
from contextlib import contextmanager
from pathlib import Path

from ..extras import needs
from ..models.errors import InputError
from .preparation import original_words, preparation_code, prepared_lines, recorded_words, segmented
from .pretraining import PACKINGS, span_coverage
from .sources import DatasetSource
from .text import corpus_files, documents_of_lines, numbered_lines, read_lines, read_text

with needs("data", "the pretraining corpus (elc_bert.data.corpus)"):
    import datasets
    from datasets.exceptions import DatasetGenerationError
    from datasets.fingerprint import Hasher

logger = logging.getLogger(__name__)

# A document's "words": its share of the words of the text as released (BabyLM's count: whitespace-separated), which
# stays the same whatever preparation does to the text.
DOCUMENT_FEATURES = datasets.Features(
    {"sentences": datasets.List(datasets.Value("string")), "words": datasets.Value("int64")}
)
# A sample's "words": the words of the tokens it is the first sample to hold ("new_tokens"); "missed_tokens": tokens
# of its document that no sample holds, on the document's last sample (0 with the packings here).
SAMPLE_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int32")),
        "words": datasets.Value("int64"),
        "new_tokens": datasets.Value("int32"),
        "missed_tokens": datasets.Value("int32"),
    }
)


def document_dataset(
    source: str | Path | list[str | Path] | DatasetSource, split: str = "train", cache_dir=None, prepare: bool = False
) -> datasets.Dataset:
    """One row per document, with a column "sentences" (its non-empty stripped lines) and its "words" (see
    DOCUMENT_FEATURES), cached on disk.

    `source` is a text file or a BabyLM-style folder (or a list of them, read in turn), read as `corpus_files(source,
    split)` + `read_documents` do: a blank line or the end of a file ends a document; .gz files are unzipped. Or it
    is a `DatasetSource`, whose own split is read (`split` is for folders). With `prepare`, each file's (or text's)
    lines are first prepared as the reference prepares the BabyLM corpus (`preparation.prepared_lines`: cleaning,
    segmentation, [PAR] marks). `cache_dir` defaults to the datasets library's cache (HF_DATASETS_CACHE).
    """
    if isinstance(source, DatasetSource):
        texts = _load_texts(source, cache_dir)
        key = _cache_key(texts._fingerprint, source.text_column, _preparation_key(prepare))
        return texts.map(
            _documents_of_texts,
            batched=True,
            fn_kwargs={"text_column": source.text_column, "prepare": prepare},
            remove_columns=[source.text_column],
            features=DOCUMENT_FEATURES,
            new_fingerprint=key,
            desc="Splitting documents into lines",
        )
    sources = source if isinstance(source, list | tuple) else [source]
    files = [path for one in sources for path in corpus_files(one, split)]
    # Each file's size and modification time are in the key: a file changed since the last run is read again.
    stats = [(str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns) for path in files]
    recorded = [recorded_words(path) for path in files]
    if prepare and any(words is not None for words in recorded):
        # Prepared twice, text gets its quotes doubled and [PAR] marks inside sentences; the folder already is what
        # `prepare` asks for, so it is read as it is (and other files of the corpus are still prepared).
        done = sorted({str(path.parent) for path, words in zip(files, recorded) if words is not None})
        logger.warning("%s: already prepared by prepare-corpus (prepared.json): read as it is", ", ".join(done))
    key = _cache_key(stats, _preparation_key(prepare), recorded)
    try:
        return datasets.Dataset.from_generator(
            _documents_of_files,
            features=DOCUMENT_FEATURES,
            # a list: one shard (generator call) per file
            gen_kwargs={"files": [str(path) for path in files], "prepare": prepare},
            cache_dir=None if cache_dir is None else str(cache_dir),
            fingerprint=key,
        )
    except DatasetGenerationError as error:
        if isinstance(error.__cause__, ValueError):  # a file that cannot be read: its own error names it
            raise error.__cause__ from None
        raise
    except ValueError as error:  # `datasets` refuses a split without rows: say which files those were
        raise InputError(f"no text in {', '.join(map(str, files))}") from error


def packed_samples(
    documents: datasets.Dataset, tokenizer, seq_length: int, progress: bool = True, packing: str = "sentences"
) -> datasets.Dataset:
    """Documents packed into [CLS] ... [SEP] samples of at most `seq_length` tokens (column "input_ids"): the samples,
    in order, of the `packing` rule (`PACKINGS`: "reference", `fill_segments`; "sentences", `pack_sentences`) over the
    documents' tokenized sentences.

    The result is cached next to `documents` (their cache folder), keyed by their fingerprint, the tokenizer's
    vocabulary and rules, `seq_length` and `packing`: a second call, in this process or another, reads it back at once.
    `progress` shows the map's progress bar.
    """
    if seq_length < 3:
        raise InputError(f"seq_length must leave room for [CLS] and [SEP] and a token, got {seq_length}")
    if "sentences" not in documents.column_names:
        raise InputError(f"documents need a 'sentences' column (from `document_dataset`), got {documents.column_names}")
    with _progress_bars(progress):
        return documents.map(
            _pack_batch,
            batched=True,
            fn_kwargs={"tokenizer": tokenizer, "seq_length": seq_length, "packing": packing},
            remove_columns=documents.column_names,
            features=SAMPLE_FEATURES,
            new_fingerprint=_cache_key(documents._fingerprint, _tokenizer_key(tokenizer), seq_length, packing),
            desc=f"Packing samples of {seq_length} tokens",
        )


def streamed_samples(
    source: DatasetSource,
    tokenizer,
    seq_length: int,
    cache_dir=None,
    packing: str = "sentences",
    prepare: bool = False,
) -> datasets.IterableDataset:
    """The samples of `packed_samples(document_dataset(source, prepare=prepare), ...)`, packed while `source` streams
    in (nothing is downloaded first nor cached; `cache_dir` only holds the loader's lock files)."""
    if seq_length < 3:
        raise InputError(f"seq_length must leave room for [CLS] and [SEP] and a token, got {seq_length}")
    with naming_damaged_files([source]):  # a json or csv loader reads its first file here, to learn the columns
        texts = _load_texts(source, cache_dir, streaming=True)
    documents = texts.map(
        _documents_of_texts,
        batched=True,
        fn_kwargs={"text_column": source.text_column, "prepare": prepare},
        remove_columns=[source.text_column],
        features=DOCUMENT_FEATURES,
    )
    return documents.map(
        _pack_batch,
        batched=True,
        fn_kwargs={"tokenizer": tokenizer, "seq_length": seq_length, "packing": packing},
        remove_columns=["sentences", "words"],
        features=SAMPLE_FEATURES,
    )


def _load_texts(source: DatasetSource, cache_dir=None, streaming: bool = False):
    """The split's text column alone (a Dataset, or an IterableDataset when streaming)."""
    texts = datasets.load_dataset(
        source.path,
        source.name,
        split=source.split,
        cache_dir=None if cache_dir is None else str(cache_dir),
        streaming=streaming,
    )
    columns = texts.column_names  # None for a stream whose features are unknown until read
    if columns is not None and source.text_column not in columns:
        raise InputError(
            f"{source.path} ({source.split} split): no text column {source.text_column!r}, its columns are {columns}"
        )
    return texts.select_columns([source.text_column])


# What reading a compressed data file that ends early (a cut-short download) or is corrupt raises.
DAMAGED_FILE_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


@contextmanager
def naming_damaged_files(sources: list[DatasetSource]):
    """For a block that reads streams of `sources` (`streamed_samples`): a data file that cannot be read to its end
    (DAMAGED_FILE_ERRORS) raises InputError naming it (the first damaged .gz file of the sources' local folders, as
    `read_text` names a file read whole), instead of the stream's bare EOFError."""
    try:
        yield
    except DAMAGED_FILE_ERRORS as error:
        damaged = next((path for source in sources for path in _data_files(source) if not _gzip_whole(path)), None)
        what = "truncated" if isinstance(error, EOFError) else "corrupt"
        named = damaged or " or ".join(source.path for source in sources)
        raise InputError(
            f"{named}: cannot be read to its end ({what} compressed data: {error}). Download or write the file again"
        ) from None


def _data_files(source: DatasetSource) -> list[str]:
    """The data files of `source`'s split, where `source` is a local folder (none for a Hub dataset)."""
    if not Path(source.path).is_dir():
        return []
    builder = datasets.load_dataset_builder(source.path, source.name)
    return list((builder.config.data_files or {}).get(source.split, []))


def _gzip_whole(path) -> bool:
    """Whether the file `path` (anything but .gz counts as whole) reads to its end."""
    if not str(path).endswith(".gz"):
        return True
    try:
        with gzip.open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    except (*DAMAGED_FILE_ERRORS, OSError):
        return False
    return True


def _documents_of_files(files: list[str], prepare: bool = False):
    """Yields the documents of each file as rows (prepared first with `prepare`); a file without text adds none."""
    for path in files:
        # the file is read once: its lines give both its documents and its words
        words = recorded_words(path)  # a file that prepare-corpus wrote: its source's words
        prepare_file = prepare and words is None  # (what prepare-corpus wrote is not prepared again)
        lines = [line for _, line in numbered_lines(path)] if prepare_file else read_lines(path)
        documents = list(documents_of_lines(prepared_lines(path, lines) if prepare_file else lines))
        words = original_words(lines) if words is None else words
        for document, share in zip(documents, _shares(words, [_whitespace_words(d) for d in documents])):
            yield {"sentences": document, "words": share}


def _documents_of_texts(batch: dict, text_column: str, prepare: bool = False) -> dict:
    """Rows of texts to rows of sentences (the stripped non-empty lines, prepared first with `prepare`) and the
    text's words; texts without any are dropped."""
    rows = {"sentences": [], "words": []}
    for text in batch[text_column]:
        lines = (text or "").splitlines()
        sentences = [line.strip() for line in (segmented(lines) if prepare else lines) if line.strip()]
        if sentences:
            rows["sentences"].append(sentences)
            rows["words"].append(len((text or "").split()))
    return rows


def _whitespace_words(document: list[str]) -> int:
    return sum(len(line.split()) for line in document)


def _shares(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights` (evenly where they are all 0), in whole numbers that sum to it: the
    rounded cumulative shares' differences."""
    if not weights:
        return []
    if not any(weights):
        weights = [1] * len(weights)
    cumulative, parts, before = 0, [], 0
    whole = sum(weights)
    for weight in weights:
        cumulative += weight
        upto = (total * cumulative + whole // 2) // whole
        parts.append(upto - before)
        before = upto
    return parts


def _pack_batch(batch: dict, tokenizer, seq_length: int, packing: str = "sentences") -> dict:
    """A batch of documents to its samples (see SAMPLE_FEATURES). Documents are packed independently, so batches
    can be too."""
    documents = batch["sentences"]
    sentences = [sentence for document in documents for sentence in document]
    # One call for the whole batch (fast); verbose=False silences the "longer than the specified maximum sequence
    # length" warning, meant for model inputs, not for sentences that packing will cut or join.
    ids = tokenizer(
        sentences, add_special_tokens=False, verbose=False, return_attention_mask=False, return_token_type_ids=False
    )["input_ids"]
    if packing not in PACKINGS:
        raise InputError(f"packing must be one of {sorted(PACKINGS)}, got {packing!r}")
    rows = {name: [] for name in SAMPLE_FEATURES}
    start = 0
    for document, words in zip(documents, batch["words"]):
        tokenized = ids[start : start + len(document)]
        start += len(document)
        tokens = [token for sentence in tokenized for token in sentence]
        spans = PACKINGS[packing]([len(sentence) for sentence in tokenized], seq_length - 2)
        new, missed = span_coverage(spans, len(tokens))
        rows["input_ids"] += [[tokenizer.cls_token_id, *tokens[a:b], tokenizer.sep_token_id] for a, b in spans]
        rows["new_tokens"] += new
        rows["missed_tokens"] += [0] * (len(spans) - 1) + [missed] if spans else []
        # the document's words go with its tokens: each sample counts those of the tokens it is the first to hold
        seen = (words * (len(tokens) - missed) + len(tokens) // 2) // len(tokens) if tokens else 0
        rows["words"] += _shares(seen, new)
    return rows


def _tokenizer_key(tokenizer):
    """What the tokenization depends on: a fast tokenizer's full definition (vocabulary, normalizer, pre-tokenizer,
    model, added tokens; not its truncation and padding state, which calls change) and the [CLS]/[SEP] ids. Not the
    Python object, whose hash changes with its `name_or_path`: a resumed run loads the tokenizer the first run saved."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a Python tokenizer: its pickled state
        return Hasher.hash(tokenizer)
    definition = json.loads(backend.to_str())
    definition.pop("truncation", None)
    definition.pop("padding", None)
    return [definition, tokenizer.cls_token_id, tokenizer.sep_token_id]


def _preparation_key(prepare: bool):
    """What prepared documents depend on besides their text (nothing when not prepared)."""
    return preparation_code() if prepare else None


def _cache_key(*parts) -> str:
    """A fingerprint of `parts` and of the code that reads and packs, so that editing that code invalidates the
    caches it wrote (`datasets` would hash a module's function by its name alone)."""
    return Hasher.hash([_CODE, *parts])


@contextmanager
def _progress_bars(enabled: bool):
    """Turns the datasets progress bars off for the block when `enabled` is False (there is no per-call switch)."""
    was_disabled = datasets.are_progress_bars_disabled()
    if not enabled and not was_disabled:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not enabled and not was_disabled:
            datasets.enable_progress_bars()


# The bytecode (not file names or line numbers) of everything that turns text into rows.
_CODE = Hasher.hash(
    [
        function.__code__
        for function in (
            read_text,
            numbered_lines,
            read_lines,
            documents_of_lines,
            original_words,
            _documents_of_files,
            _documents_of_texts,
            _shares,
            _pack_batch,
            span_coverage,
        )
    ]
    + [pack.__code__ for pack in PACKINGS.values()]
)

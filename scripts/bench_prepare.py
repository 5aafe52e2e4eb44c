"""Corpus preparation on long lines: the time of the BabyLM cleaning rules (`elc_bert.data.preparation`) on one line
of growing length, and the ratio of each time to the time of the shortest line.

A rule whose cost is linear in the line's length shows a ratio near the length ratio (4x the length: about 4x the
time); a quadratic one shows its square (16x). The line is the text of `--text` (by default the WikiText sample in
data/samples; a BabyLM file such as cbt.train.gz reads as the corpus does) joined into one line, its first
characters (as many as the shortest line has) repeated to each length: the shape of a BabyLM file whose paragraphs sit
on one line. Each time is the best of `--rounds`.

    python scripts/bench_prepare.py [--lengths 250000 500000 1000000 --rules cbt aochildes bnc_spoken --rounds 2]
    python scripts/bench_prepare.py --text ../shared/data/babylm/2023/train_10M/cbt.train.gz --segment
    python scripts/bench_prepare.py --baseline-src ../elc-bert-old  # another checkout's rules, timed beside these

`--segment` times the sentence splits and [PAR] marks (`segmented`) after the rule, as prepare-corpus runs them.
`--baseline-src DIR` adds rows for the rules of another checkout of this package (its `elc_bert/`, imported under
another name, as scripts/bench_model.py does), and checks that both give the same text.
"""

import argparse
import importlib
import sys
import time
from pathlib import Path

from elc_bert.data import preparation
from elc_bert.data.text import read_lines

sys.path.insert(0, str(Path(__file__).parent))
from bench_model import import_baseline  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"


def line_of(text: str, length: int) -> str:
    """One line of `length` characters: `text` repeated as often as needed."""
    return (text + " ") * (length // (len(text) + 1)) + text[: length % (len(text) + 1)]


def best_time(function, line: str, rounds: int) -> tuple[float, list[str]]:
    """The shortest of `rounds` timings of `function(line)`, and its output."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        output = function(line)
        times.append(time.perf_counter() - start)
    return min(times), output


def rule(module, name: str, segment: bool):
    """The cleaning rule of BabyLM source `name` in `module` (this checkout's preparation or a baseline's), as a
    function of one line to its output lines."""
    clean = module.BABYLM_SOURCES[name].clean
    if segment:
        return lambda line: list(module.segmented(clean([line])))
    return lambda line: list(clean([line]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", type=Path, default=SAMPLE, help="the text the lines are made of")
    parser.add_argument("--lengths", type=int, nargs="+", default=[250_000, 500_000, 1_000_000], help="characters")
    parser.add_argument("--rules", nargs="+", default=["cbt", "aochildes", "bnc_spoken"], help="BabyLM sources")
    parser.add_argument("--rounds", type=int, default=2, help="timings per line; the best counts")
    parser.add_argument("--segment", action="store_true", help="time the sentence splits after each rule too")
    parser.add_argument("--baseline-src", help="another checkout of this repository, timed beside this one")
    args = parser.parse_args()
    unknown = sorted(set(args.rules) - set(preparation.BABYLM_SOURCES))
    if unknown:
        parser.error(f"no BabyLM source {', '.join(unknown)}; the sources: {', '.join(preparation.BABYLM_SOURCES)}")
    modules = {"": preparation}
    if args.baseline_src:
        baseline = import_baseline(args.baseline_src)
        modules[" baseline"] = importlib.import_module(f"{baseline.__name__}.data.preparation")
    lengths = sorted(args.lengths)
    # Every line repeats the same piece of text (the shortest line's worth), so that the lines differ in length
    # alone: ftfy, for one, works much harder on some passages than on others.
    text = " ".join(line.strip() for line in read_lines(args.text) if line.strip())[: lengths[0]]
    lines = {length: line_of(text, length) for length in lengths}
    for module in modules.values():  # the libraries' first calls (imports, models) are not timed
        rule(module, args.rules[0], args.segment)(lines[lengths[0]][:1000])

    print(f"text {args.text.name}, best of {args.rounds}" + (", with segmentation" if args.segment else ""))
    header = " | ".join(f"{length:,} chars (s) | ratio" for length in lengths)
    print(f"| rule | {header} |")
    print("|---|" + "---:|---:|" * len(lengths))
    differ = []
    for name in args.rules:
        outputs = {}
        for suffix, module in modules.items():
            cells, first = [], None
            timed = rule(module, name, args.segment)
            for length in lengths:
                seconds, outputs[suffix, length] = best_time(timed, lines[length], args.rounds)
                first = first or seconds
                cells.append(f"{seconds:.3f} | {seconds / first:.1f}x")
            print(f"| {name}{suffix} | {' | '.join(cells)} |")
        if len(modules) > 1 and any(outputs["", n] != outputs[" baseline", n] for n in lengths):
            differ.append(name)
    if len(modules) > 1:
        print("text as the baseline's: " + (f"DIFFERS for {', '.join(differ)}" if differ else "the same for all"))
    ratios = ", ".join(f"{length / lengths[0]:.1f}x" for length in lengths)
    print(f"length ratios: {ratios} (a linear rule's time ratios are alike)")


if __name__ == "__main__":
    main()

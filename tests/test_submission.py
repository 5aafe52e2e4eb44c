"""The BabyLM 2025 submission guide (docs/guides/babylm-submission.md) run end to end on a tiny model (issue 63): its
command lines, through `elc-bert`, from a pretraining run with three milestones to the collated submission file.

The evaluation data is made up here, small, in the pipeline's `evaluation_data` layout (full_eval/, fast_eval/, the
fast entity-tracking set too, and full_eval/glue_filtered/ for the seven fine-tuning tasks); its item counts are not
the pipeline's, so the collation is given them (`collate(counts=...)`, which the command line does not take).
"""

import json
import os
import random
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import MILESTONES, REPO, write_reading_csv

from elc_bert.cli import main as cli_main
from elc_bert.data.glue import TASKS as GLUE
from elc_bert.evaluation import reading
from elc_bert.evaluation.babylm import TASKS
from elc_bert.evaluation.collate import GLUE_TASKS, ItemCounts, collate

MODEL = "my-babylm"
REVISIONS = list(MILESTONES)  # chck_1M, chck_2M, chck_3M: strict-small up to chck_3M
NOUNS = "cat dog house tree man woman city river king war".split()
VERBS = "saw found took left made".split()
BLIMP_LABELS = {"field": "morphology", "linguistics_term": "agreement"}
AOA_WORDS = ("ball", "dog", "milk")  # the words of each revision in the made-up AoA file


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def _record(key: str, uid: str, i: int, rng) -> dict:
    """A made-up item of `uid` in the format of the zero-shot task `key`, the right candidate first."""
    a, b = rng.sample(NOUNS, 2)
    verb = rng.choice(VERBS)
    good, bad = f"The {a} {verb} the {b}.", f"The {a} the {verb} {b}."  # the same words in a worse order
    if key == "blimp":
        return {"sentence_good": good, "sentence_bad": bad, "UID": uid, **BLIMP_LABELS}
    if key == "blimp_supplement":  # the UID is the file's
        return {"sentence_good": good, "sentence_bad": bad}
    if key == "ewok":
        return {"Domain": uid, "Context1": f"The {a} is here.", "Target1": good, "Target2": bad}
    if key == "entity_tracking":  # the UID is <file>_<numops>_ops
        options = [f" the {a}.", f" the {b}.", " nothing."]
        return {
            "input_prefix": f"Box {i} holds the {a}. Box {i} holds",
            "options": options,
            "numops": int(uid.split("_")[-2]),
        }
    if key == "comps":
        return {"prefix_acceptable": f"A {a}", "prefix_unacceptable": f"A {b}", "property_phrase": "can fly."}
    return {"sentences": f"The blick{i}ness is here.\tThe blick{i}ity is here.", "ratio": rng.random()}  # wug


def _records(key: str, uid: str, n: int, rng) -> list[dict]:
    return [_record(key, uid, i, rng) for i in range(n)]


def write_evaluation_data(root: Path) -> ItemCounts:
    """ROOT/evaluation_data in the pipeline's layout, a few items per UID; returns their counts, the stand-in for
    the pipeline's table of the real data's."""
    rng = random.Random(0)
    full, fast = root / "evaluation_data" / "full_eval", root / "evaluation_data" / "fast_eval"
    counts = ItemCounts(
        full={
            "blimp": {"anaphor_number_agreement": 3, "regular_plural_subject_verb_agreement_1": 2},
            "blimp_supplement": {"hypernym": 2, "turn_taking": 1},
            "ewok": {"agent-properties": 2, "social-relations": 1},
            "entity_tracking": {"regular_0_ops": 2, "regular_1_ops": 1, "ambiref_0_ops": 1, "move_contents_1_ops": 1},
            "wug_adj": 5,
            "wug_past": 4,
            "comps": {"base": 2, "wugs": 1},
            "reading": 0,  # the rows of the reading file, below
            **{task: 4 for task in GLUE_TASKS},
        },
        fast={
            "blimp": 4,
            "blimp_supplement": 2,
            "ewok": 2,
            "entity_tracking": {"regular_0_ops": 2, "regular_1_ops": 2},  # the regular file's items only
            "wug_adj": 5,
            "wug_past": 4,
            "reading": 0,
        },
        aoa=len(AOA_WORDS),
    )
    for key, full_folder, fast_folder in (("blimp", "blimp_filtered", "blimp_fast"),
                                          ("blimp_supplement", "supplement_filtered", "supplement_fast"),
                                          ("ewok", "ewok_filtered", "ewok_fast")):  # fmt: skip
        for uid, n in counts.full[key].items():
            _jsonl(full / full_folder / f"{uid}.jsonl", _records(key, uid, n, rng))
            _jsonl(fast / fast_folder / f"{uid}.jsonl", _records(key, uid, counts.fast[key], rng))
    for folder, uids in ((full / "entity_tracking", counts.full["entity_tracking"]),
                         (fast / "entity_tracking_fast", counts.fast["entity_tracking"])):  # fmt: skip
        by_file = {}
        for uid, n in uids.items():
            by_file.setdefault(uid.rsplit("_", 2)[0], []).extend(_records("entity_tracking", uid, n, rng))
        for name, records in by_file.items():
            _jsonl(folder / f"{name}.jsonl", records)
    for key, folder in (("wug_adj", "wug_adj_nominalization"), ("wug_past", "wug_past_tense")):
        # one set, read from full_eval/ by the fast evaluation too, as staged
        _jsonl(full / folder / f"{folder}.jsonl", _records(key, key, counts.full[key], rng))
    for uid, n in counts.full["comps"].items():
        _jsonl(full / "comps" / f"comps_{uid}.jsonl", _records("comps", uid, n, rng))
    rows = len(reading.read_reading(write_reading_csv(full / "reading" / "reading_data.csv")))
    counts.full["reading"] = counts.fast["reading"] = rows
    for task in GLUE_TASKS:  # the fine-tuning tasks' training and dev files (MNLI's mismatched dev set too)
        spec = GLUE[task]
        splits = [(task, "train", 8), (task, "valid", counts.full[task])] + [("mnli-mm", "valid", 4)] * (task == "mnli")
        for entry, split, n in splits:
            records = [{**{name: f"the {rng.choice(NOUNS)} {rng.choice(VERBS)} it" for name in spec.fields},
                        "label": i % spec.num_labels} for i in range(n)]  # fmt: skip
            _jsonl(full / "glue_filtered" / f"{entry}.{split}.jsonl", records)
    return counts


GUIDE = REPO / "docs" / "guides" / "babylm-submission.md"
ELC_BERT = [sys.executable, "-c", "import sys, elc_bert_main; sys.argv[0] = 'elc-bert'; elc_bert_main.main()"]


def dry_run_block() -> list[str]:
    """The guide's dry run (its "A dry run at toy scale" bash block), one command a line (continuations joined)."""
    section = GUIDE.read_text(encoding="utf-8").split("## 0. A dry run at toy scale", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def run_dry_run(tmp_path: Path, monkeypatch) -> list[str]:
    """Runs the guide's dry run as written in `tmp_path` (with this repository's data/ linked there): the local Hub
    started as the block starts it (on a free port), the exports and variables as a shell would set them, each
    `elc-bert` line through the command line's own entry point; returns the collation's refusal (the last line)."""
    from hub_server import point_hub_client_at

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(REPO / "data")
    variables, refusal, server = {}, None, None
    try:
        for line in dry_run_block():
            words = shlex.split(re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], line).rstrip("&"))
            if words[:2] == ["elc-bert", "local-hub"]:
                assert line.endswith("&") and words[2:] == ["--port", "8765"]
                server = subprocess.Popen([*ELC_BERT, "local-hub", "--port", "0"], stdout=subprocess.PIPE, text=True)
                printed = [server.stdout.readline() for _ in range(2)][1]
            elif words[0] == "export":
                assert printed.split("export ", 1)[1].split()[1] == words[2]  # the token the server prints
                pairs = dict(word.split("=", 1) for word in words[1:])
                endpoint = printed.split("HF_ENDPOINT=", 1)[1].split()[0]  # the block's port is 8765: here a free one
                assert pairs["HF_ENDPOINT"].rsplit(":", 1)[0] == endpoint.rsplit(":", 1)[0]
                point_hub_client_at(monkeypatch, endpoint, pairs["HF_TOKEN"])
                monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
            elif "=" in words[0] and len(words) == 1:
                name, value = words[0].split("=", 1)
                variables[name] = value  # unquoted where it is used ($FAST: several words)
            else:
                assert words[0] == "elc-bert", line
                if words[1] == "collate":  # the last line: it names what a dry run lacks
                    with pytest.raises(SystemExit) as refused:
                        cli_main(words[1:])
                    assert refused.value.code == 2
                    refusal = words
                else:
                    cli_main(words[1:])
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return refusal


@pytest.mark.slow
def test_the_submission_guide_runs_end_to_end(tmp_path, monkeypatch, capsys):
    counts = write_evaluation_data(tmp_path)
    # 0. the dry run, as the guide writes it: pretrain with scaled milestones, push the revisions to the local Hub,
    # score every revision and main, fine-tune, and the collation names what the small made-up data lacks
    assert run_dry_run(tmp_path, monkeypatch)[1] == "collate"
    refusal = capsys.readouterr().err.strip().splitlines()[-1]
    assert refusal.endswith(
        "1 problem(s): results/my-babylm/main/zero_shot/mlm/AoA_word/surprisal.json: missing (aoa, "
        "revision main) (--debug shows the traceback)"
    )
    assert sorted(p.name for p in Path("runs/my-babylm").glob("words-*")) == sorted(MILESTONES.values())
    revisions = sorted(p.parent.parent.name for p in Path("results", MODEL).glob("chck_*/eval-babylm/blimp.json"))
    assert revisions == REVISIONS  # scored by the first eval-babylm line; the second's summary is main's alone
    # 5. AoA runs with the official pipeline (we do not implement it: its word list is not staged); its output,
    # zero_shot/<backend>/AoA_word/surprisal.json with a set of words per revision, is made up here in its layout.
    aoa = {"results": [{"step": revision, "word": word, "surprisal": 4.5} for revision in REVISIONS
                       for word in AOA_WORDS]}  # fmt: skip
    aoa_file = Path("results", MODEL, "main", "zero_shot", "mlm", "AoA_word", "surprisal.json")
    aoa_file.parent.mkdir(parents=True)
    aoa_file.write_text(json.dumps(aoa))
    # ... and given the small sets' counts, writes the submission
    out = collate("results", MODEL, "strict-small", data="evaluation_data", up_to=REVISIONS[-1], counts=counts)

    assert out == Path("results", MODEL, "all_full_preds_and_fast_scores_mlm.json")
    submission = json.loads(out.read_text())
    keys = [task.key for task in TASKS.values()]
    assert list(submission) == [*keys, "aoa", "glue", "fast_eval_results"]
    for key in keys:
        required = counts.full[key]
        uids = set(required) if isinstance(required, dict) else {key}
        assert {uid.lower() for uid in submission[key]} == uids, key
    assert submission["aoa"] == aoa and sorted(submission["glue"]) == sorted(GLUE_TASKS)
    fast = submission["fast_eval_results"]
    assert list(fast) == [task.key for task in TASKS.values() if task.on_revisions]
    assert all(len(scores) == len(REVISIONS) for scores in fast.values())
    assert all(set(scores) == {"spr", "rt"} for scores in fast["reading"])
    # each revision's fast BLiMP score (accuracy per UID, a fraction) is eval-babylm's (in percent)
    for revision, by_uid in zip(REVISIONS, fast["blimp"]):
        ours = json.loads(Path("results", MODEL, revision, "eval-babylm", "blimp.json").read_text())["by"]["UID"]
        assert set(by_uid) == set(counts.full["blimp"])
        assert by_uid == pytest.approx({uid: accuracy / 100 for uid, accuracy in ours.items()}, abs=1e-9)


def test_elc_bert_local_hub_serves_a_push_and_a_download(tmp_path):
    """The guide's dry-run Hub (`elc-bert local-hub`): it prints the two variables to export, and a client pointed at
    it by them alone pushes a file to a branch and reads it back; the parser's default token is the server's."""
    from elc_bert.hub.local_hub import DEFAULT_TOKEN
    from elc_bert_cli import build_parser

    assert build_parser().parse_args(["local-hub"]).token == DEFAULT_TOKEN
    server = subprocess.Popen(
        [*ELC_BERT, "local-hub", "--port", "0", "--token", "hf_dry_run"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [server.stdout.readline() for _ in range(2)]
        (export,) = [line.split("export ", 1)[1].split() for line in lines if "export " in line]
        env = dict(pair.split("=", 1) for pair in export)
        assert env["HF_TOKEN"] == "hf_dry_run" and env["HF_ENDPOINT"].startswith("http://127.0.0.1:")
        script = """
            import sys
            from huggingface_hub import HfApi, hf_hub_download
            api = HfApi()
            api.create_repo("me/dry")
            api.create_branch("me/dry", branch="chck_1M")
            api.upload_file(path_or_fileobj=b"hello", path_in_repo="x.txt", repo_id="me/dry", revision="chck_1M")
            refs = sorted(b.name for b in api.list_repo_refs("me/dry").branches)
            path = hf_hub_download("me/dry", "x.txt", revision="chck_1M", cache_dir=sys.argv[1])
            print(refs, open(path).read())
        """
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | env
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "cache")],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "['chck_1M', 'main'] hello"
    finally:
        server.terminate()
        server.wait(timeout=30)

"""The README.md (model card) of an exported folder, from the templates in `model_cards/` and a run directory.

Only what the run measured is written: the metrics come from the run's own files (`metrics.json` of `elc-bert
pretrain` and `elc-bert mlm`, `results.json` of `elc-bert finetune-ner`), nothing is derived or filled in, and the data
is named as the run's saved config names it (local files by their path in the text, and in the model-index by the id
of the dataset they copy, never a path; Hub datasets by their id). Without a run directory, or with the run's metrics
left out, the card has no results and says why.
"""

import dataclasses
import json
import math
import re
import shutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import metadata as package_metadata
from pathlib import Path
from string import Template

import torch
import transformers
from huggingface_hub import EvalResult, ModelCard, ModelCardData

import elc_bert
from elc_bert import plots, runs
from elc_bert.intervals import mean_and_interval
from elc_bert.job_configs import FinetuneNerConfig, MlmConfig, PretrainConfig, saved_config
from elc_bert.models import AUTO_CLASSES, FUSIONS, ElcBertModel, LayerFusionModel
from elc_bert.pretrained import MODEL_ALIASES, is_hub_id

from ..models.errors import InputError, InputNotFoundError

TEMPLATES_DIR = Path(__file__).parent / "model_cards"  # a link to the repo's model_cards/; a folder in the wheel

# finetune-ner's `dataset` -> (its name, the Hub id of the dataset its local files copy)
NER_CORPORA = {"conll03": ("CoNLL-2003", "conll2003"), "wikiann": ("WikiAnn", "wikiann")}
# Sentences in each split of the NER datasets whose sizes are known here ((dataset, WikiAnn language) -> split ->
# sentences): what tells a run that read the whole split from one that read a sample.
NER_SPLIT_SIZES = {
    ("conll03", None): {"train": 14041, "dev": 3250, "test": 3453},
    ("wikiann", "en"): {"train": 20000, "dev": 10000, "test": 10000},
}
SPLIT_NAMES = {"train": "train", "dev": "validation", "test": "test"}  # a finetune-ner split -> the model-index's
BABYLM_SOURCES = 10  # sources of the BabyLM 2023 strict-small corpus

PIPELINE_TAGS = {
    "ForMaskedLM": ("fill-mask", "Masked language modelling"),
    "ForTokenClassification": ("token-classification", "Token classification"),
    "ForSequenceClassification": ("text-classification", "Text classification"),
    "ForMultipleChoice": ("multiple-choice", "Multiple choice"),
    "ForQuestionAnswering": ("question-answering", "Question answering"),
}
# What the card's usage snippet does with the model, by the pipeline of its head; a head without a pipeline here is
# loaded through its Auto class (`AUTO_EXAMPLES`).
PIPELINE_EXAMPLES = {
    "fill-mask": ("fill", 'print(fill(f"The child played with the {fill.tokenizer.mask_token} ."))'),
    "token-classification": ("ner", 'print(ner("John lives in Oslo ."))'),
    "text-classification": ("classify", 'print(classify("A short sentence ."))'),
}
PIPELINE_OPTIONS = {"token-classification": ', aggregation_strategy="simple"'}
AUTO_EXAMPLES = {
    "AutoModel": (
        '\ninputs = tokenizer("A short sentence .", return_tensors="pt")\n'
        "states = model(**inputs).last_hidden_state  # B x T x D"
    ),
}


def _template(templates_dir: Path, name: str) -> Template:
    path = templates_dir / name
    if not path.is_file():
        raise InputNotFoundError(f"model card template {path} is missing (templates_dir={templates_dir})")
    return Template(path.read_text(encoding="utf-8"))


def _fill(templates_dir: Path, name: str, **values) -> str:
    try:
        return _template(templates_dir, name).substitute(**values).strip()
    except KeyError as error:
        raise KeyError(f"{templates_dir / name}: no value for ${error.args[0]}") from None


@dataclass(frozen=True)
class Run:
    """What a card knows of the run that made its model: the job (None without a run), the config the job saved (its
    config class), what the run measured, its folder, and why its metrics are left out (None: they are not);
    `sentences`: what a finetune-ner run read per split (provenance, kept when the metrics are left out)."""

    job: str | None = None
    config: PretrainConfig | MlmConfig | FinetuneNerConfig | None = None
    metrics: dict = dataclasses.field(default_factory=dict)
    dir: Path | None = None
    left_out: str | None = None
    sentences: dict = dataclasses.field(default_factory=dict)


def read_run(run_dir: Path | None) -> Run:
    """The run's job, saved config and measured metrics, from the files its job wrote."""
    if run_dir is None:
        return Run()
    run_dir = Path(run_dir)
    jobs = ("pretrain", "mlm", "finetune-ner")
    for job in jobs:
        if job not in runs.jobs_of(run_dir):
            continue
        config = saved_config(run_dir, job)
        if job == "finetune-ner":
            results_file = run_dir / runs.RESULTS
            metrics = json.loads(results_file.read_text(encoding="utf-8")) if results_file.is_file() else {}
        else:
            metrics_file = run_dir / runs.METRICS
            metrics = json.loads(metrics_file.read_text(encoding="utf-8"))["final"] if metrics_file.is_file() else {}
        return Run(job, config, metrics, run_dir, sentences=metrics.get("sentences", {}))
    names = ", ".join(runs.JOB_CONFIGS[job] for job in jobs)
    raise InputNotFoundError(f"{run_dir}: not a run directory (none of {names})")


@dataclass(frozen=True)
class Corpus:
    """Data a run read, as its saved config names it: a Hub dataset (`path` its id, `config` its configuration) or
    local files (`path` as the job was given it; `dataset_id` the Hub id of the dataset they are a copy of, when the
    job reads a known one)."""

    name: str  # what the data is, e.g. "CoNLL-2003"; as the config names it when it says no more
    path: str
    on_hub: bool = False
    config: str | None = None
    dataset_id: str | None = None

    @property
    def index_type(self) -> str:
        """The model-index's `dataset.type`, never a local path: the Hub id of the dataset, or of the one the local
        files copy, else "text" (the `datasets` library's name for plain text files, as its cards write it)."""
        return self.path if self.on_hub else self.dataset_id or "text"

    def __str__(self) -> str:
        if self.on_hub:
            return f"the Hub dataset `{self.path}`" + (f" ({self.config})" if self.config else "")
        path = shown_path(self.path)
        return f"{self.name} from local files `{path}`" if self.dataset_id else f"local files `{path}`"


def shown_path(path) -> str:
    """A local path as a card shows it: a relative one as given, an absolute one by its last two parts
    (`.../data/train.txt`), so that a published card names no folder of the machine that made it."""
    parts = Path(str(path)).parts
    if not Path(str(path)).is_absolute():
        return str(path)
    return "/".join(("...", *parts[-2:])) if len(parts) > 3 else str(path)


def _job_folder(run: Run) -> Path | None:
    """The folder the run's job ran in, where its relative paths start: the run folder less the relative
    `output_dir` its config saved. None when that does not tell: an absolute output_dir or one with "..", or a run
    folder moved since."""
    run_dir, output_dir = run.dir, run.config.output_dir if run.config is not None else ""
    parts = Path(output_dir).parts
    if run_dir is None or not parts or Path(output_dir).is_absolute() or ".." in parts:
        return None
    here = Path(run_dir).resolve().parts
    return Path(*here[: -len(parts)]) if len(here) > len(parts) and here[-len(parts) :] == parts else None


def _read_from_hub(run: Run, name: str, named_on_hub: bool) -> bool:
    """Whether the run's job read `name` from the Hub, for a job that reads a local folder of that name where it
    ran when there is one, else the Hub (`datasets.load_dataset`, `elc-bert mlm`'s data_dir, a model name): never
    for a name no Hub id has; by the folder the job ran in where the run shows it (`_job_folder`); else when the
    config names it as a Hub source (`named_on_hub`). The folder `export` runs in plays no part."""
    if not is_hub_id(name):
        return False
    folder = _job_folder(run)
    return named_on_hub if folder is None else not (folder / name).exists()


def run_corpora(run: Run) -> tuple[list[Corpus], list[Corpus]]:
    """(training data, evaluation data) of the run, from its saved config: `elc-bert finetune-ner` and the files of
    `elc-bert pretrain` are local files; a `datasets` source of pretrain (a dict entry) and the data_dir of
    `elc-bert mlm` are a Hub dataset or a local folder (`_read_from_hub`; mlm's config names a Hub dataset by its
    `dataset_config`)."""
    config = run.config
    if isinstance(config, PretrainConfig):

        def corpus(entry) -> Corpus:
            if isinstance(entry, dict):
                path = str(entry.get("path"))
                return Corpus(path, path, _read_from_hub(run, path, named_on_hub=True), entry.get("name"))
            return Corpus(str(entry), str(Path(config.data_dir) / entry))

        return [corpus(entry) for entry in config.train_files], [corpus(entry) for entry in config.validation_files]
    if isinstance(config, MlmConfig):
        path = config.data_dir
        if _read_from_hub(run, path, named_on_hub=config.dataset_config is not None):
            data = Corpus(path, path, on_hub=True, config=config.dataset_config)
        else:  # the job's local files are WikiText-2's train/valid/test
            data = Corpus("WikiText-2", path, dataset_id="wikitext")
        return [data], [data]
    if isinstance(config, FinetuneNerConfig):
        name, dataset_id = NER_CORPORA[config.dataset]
        language = config.language if config.dataset == "wikiann" else None
        if language:
            name += f" ({language})"
        data = Corpus(name, config.data_dir, config=language, dataset_id=dataset_id)  # local files only
        return [data], [data]
    return [], []


def ner_split_sizes(config: FinetuneNerConfig) -> dict[str, int] | None:
    """The sentences in each split of the run's dataset (`NER_SPLIT_SIZES`), or None where they are not known."""
    return NER_SPLIT_SIZES.get((config.dataset, config.language if config.dataset == "wikiann" else None))


def ner_samples(run: Run) -> dict[str, str]:
    """{split ("train", "dev", "test"): how it is a sample} for the splits of a finetune-ner run that were not the whole
    split of the dataset: fewer sentences than the dataset's split has (`NER_SPLIT_SIZES`, from the sentence counts
    the run recorded), or a cap in the config (`max_eval_sentences`, `max_test_sentences`)."""
    config, read, full = run.config, run.sentences, ner_split_sizes(run.config) or {}
    caps = {"dev": config.max_eval_sentences, "test": config.max_test_sentences}
    samples = {}
    for split in ("train", "dev", "test"):
        if split in read and split in full:
            if read[split] < full[split]:
                samples[split] = f"{read[split]:,} of its {full[split]:,} {split} sentences"
        elif caps.get(split) is not None:  # a cap that may have cut the split: no more read than it, less than all
            cap = caps[split]
            if cap <= read.get(split, math.inf) and cap < full.get(split, math.inf):
                samples[split] = f"its first {cap:,} {split} sentences at most"
    return samples


def whole_ner_dataset(run: Run) -> bool:
    """Whether the finetune-ner run read every split of a dataset whose sizes are known, in full."""
    read, full = run.sentences, ner_split_sizes(run.config)
    return full is not None and all(read.get(split) == size for split, size in full.items()) and not ner_samples(run)


def _results(task: tuple[str, str], corpus: Corpus, split: str, metrics: list) -> list[EvalResult]:
    """One model-index entry per (metric type, label, value) of `metrics`, measured on `split` of `corpus`."""
    return [
        EvalResult(
            task_type=task[0],
            task_name=task[1],
            dataset_type=corpus.index_type,
            dataset_name=corpus.name,
            dataset_config=corpus.config,
            dataset_split=split,
            metric_type=kind,
            metric_name=label,
            metric_value=value,
        )
        for kind, label, value in metrics
    ]


def measured_results(run: Run, task: tuple[str, str]) -> tuple[list[EvalResult], list[str]]:
    """The model-index results and the Markdown table rows of what the run measured (and nothing else)."""
    config, metrics = run.config, run.metrics
    _, evaluation = run_corpora(run)
    results, rows = [], []
    if isinstance(config, PretrainConfig):
        if "eval_loss" in metrics:
            validation = ", ".join(corpus.name for corpus in evaluation) or "validation files"
            dataset = evaluation[0] if len(evaluation) == 1 else Corpus(validation, validation)
            results += _results(
                ("fill-mask", "Masked language modelling"),
                dataset,
                "validation",
                [("loss", "validation MLM loss", metrics["eval_loss"])],
            )
            rows.append(f"| validation MLM loss ({validation}) | {metrics['eval_loss']:.4f} |")
        if "train_loss" in metrics:
            rows.append(f"| training MLM loss, mean over the run | {metrics['train_loss']:.4f} |")
    elif isinstance(config, MlmConfig):
        dataset = evaluation[0]
        for split in ("validation", "test"):
            pairs = [
                (metric, f"{split} MLM {metric}", metrics[f"{split}_{metric}"])
                for metric in ("loss", "perplexity")
                if f"{split}_{metric}" in metrics
            ]
            if pairs:
                results += _results(("fill-mask", "Masked language modelling"), dataset, split, pairs)
                rows.extend(f"| {dataset.name} {label} | {value:.4f} |" for _, label, value in pairs)
    elif isinstance(config, FinetuneNerConfig):
        samples = {SPLIT_NAMES[split]: f"a sample: {how}" for split, how in ner_samples(run).items()}
        unit = "sentences per entity type" if config.shot_unit == "per_entity_type" else "sentences"
        # Per N: the best dev F1 of each trial, and the test F1 of that epoch's model where the run scored one
        # (`finetune_ner.summarize`).
        splits = (
            ("validation", "best dev micro-F1", "best_dev_f1", "mean", "ci95"),
            ("test", "test micro-F1 of the best dev epoch", "test_f1", "test_mean", "test_ci95"),
        )
        for key, value in metrics.items():
            if not (key.startswith("n") and key[1:].isdigit() and isinstance(value, dict) and "mean" in value):
                continue
            for split, measure, values, mean, ci95 in splits:
                if mean not in value:
                    continue
                label = f"{measure}, N={key[1:]} {unit}, mean of {len(value.get(values, []))} trials"
                dataset = evaluation[0]
                if split in samples:  # named as a sample in the model-index and in the table
                    dataset = dataclasses.replace(dataset, name=f"{dataset.name}, {samples[split]}")
                    label += f" ({samples[split]})"
                results += _results(task, dataset, split, [("f1", label, value[mean])])
                per_trial = ", ".join(f"{100 * v:.1f}" for v in value.get(values, []))
                rows.append(f"| {label} | {mean_and_interval(value[mean], value[ci95])} ({per_trial}) |")
    return results, rows


def _stand_in_note(run: Run) -> str:
    """Says plainly whether the pretraining files were the BabyLM 2023 strict-small corpus or a stand-in."""
    files, data_dir = run.config.train_files, Path(run.config.data_dir)
    babylm = [f for f in files if isinstance(f, str) and Path(f).parts[:1] == ("babylm",)]
    training, _ = run_corpora(run)
    others = [corpus for f, corpus in zip(files, training) if f not in babylm]
    sources = []
    for entry in babylm:
        folder = data_dir / entry
        if not folder.exists():
            return (
                f"The training files ({', '.join(babylm)} under `{data_dir}`) could not be found when this card was "
                "written, so the card cannot tell whether they were the full BabyLM 2023 corpus."
            )
        sources += sorted(p.name.split(".")[0] for p in folder.iterdir()) if folder.is_dir() else [folder.name]
    if babylm and not others and len(sources) >= BABYLM_SOURCES:
        return f"Trained on the BabyLM 2023 corpus files {', '.join(babylm)}."
    parts = []
    if babylm:
        parts.append(f"{len(sources)} of the {BABYLM_SOURCES} BabyLM 2023 strict-small sources ({', '.join(sources)})")
    parts += [str(corpus) for corpus in others]
    return (
        "**Stand-in corpus, not BabyLM.** This model was not trained on the BabyLM 2023 strict-small corpus that "
        f"ELC-BERT was designed for, but on a stand-in: {' plus '.join(parts)}. Its numbers are not comparable "
        "with published BabyLM results."
    )


def _sample_text(run: Run) -> str:
    """ " (a sample: ...)" when a finetune-ner run read only part of its dataset's splits, else ""."""
    samples = ner_samples(run)
    return f" (a sample: {'; '.join(samples.values())})" if samples else ""


def _training_text(run: Run, model_dir: str, run_model: str | None) -> str:
    """What the run did, on which data; `run_model`: where in the run the exported weights were saved."""
    config = run.config
    training, _ = run_corpora(run)
    data = "; ".join(map(str, training)) or "data the run's config does not name"
    saved_as = f" (`{run_model}`)" if run_model else ""
    if config is None:
        return "No run directory was given to the export, so this card records no training details and no results."
    if isinstance(config, PretrainConfig):
        return (
            f"Pretrained from scratch with `elc-bert pretrain` (run `{shown_path(run.dir)}`): preset "
            f"`{config.preset}`, {config.max_steps} steps of batch {config.batch_size} x {config.seq_length} "
            f"tokens, optimizer {config.optimizer}, peak learning rate {config.learning_rate}, seed {config.seed}; "
            f"training data: {data}.\n\n" + _stand_in_note(run)
        )
    if isinstance(config, MlmConfig):
        how = "plain" if config.fusion is None else f"through a {config.fusion} fusion head"
        return (
            f"Masked-LM fine-tuning of `{config.model}` ({how}) on {data} with `elc-bert mlm` (run "
            f"`{shown_path(run.dir)}`): {config.epochs} epochs, learning rate {config.learning_rate}, blocks of "
            f"{config.block_size} tokens, seed {config.seed}; the checkpoint with the best validation "
            f"loss{saved_as} is the one exported."
        )
    mode = "backbone frozen (feature extraction)" if config.freeze_backbone else "all weights trained"
    text = (
        f"Few-shot NER on {data}{_sample_text(run)} with `elc-bert finetune-ner` (run `{shown_path(run.dir)}`): "
        f"backbone `{config.model}`, fusion {config.fusion}, {mode}; N in {config.shots}, {config.trials} trials each, "
        f"{config.epochs} epochs, learning rate {config.learning_rate}; each trial keeps its best dev-set epoch."
    )
    weights = f"are the run's `{run_model}`" if run_model else f"come from `{model_dir}`"
    results = "; the results below describe all of the run's trials, not these exact weights" if run.metrics else ""
    return text + f"\n\nThe weights exported here {weights}, one trial's best dev epoch{results}."


def _figures(model, run: Run, out_dir: Path) -> str:
    figures = []
    base = model.base_model
    backbone = base.backbone if isinstance(base, LayerFusionModel) else base
    if isinstance(backbone, ElcBertModel) and backbone.encoder.elc:
        plots.plot_layer_weights(out_dir / "alpha.png", {"ELC layer weights alpha": backbone.layer_weights().tolist()})
        figures.append(
            (
                "alpha.png",
                "ELC layer weights: row n is softmax(theta^(n)), how much block n reads of each earlier state.",
            )
        )
    run_dir = None if run.left_out else run.dir  # the run's plots are measurements too
    recorded = runs.mean_depth_profiles(run_dir) if run_dir is not None and run.job == "finetune-ner" else {}
    profiles = {f"N={shots} ({trials} trials)": weights for shots, (trials, weights) in recorded.items()}
    if profiles:
        first_state = 0 if getattr(model.config, "fuse_embeddings", True) else 1  # z_0 (the embeddings) or z_1
        plots.plot_depth_profile(
            out_dir / "depth_profile.png", profiles, "DWAtt depth profile (dev tokens)", first_state
        )
        figures.append(("depth_profile.png", "DWAtt depth profile: mean weight of each fused state over dev tokens."))
    copies = {
        runs.LOSS_PLOT: "Training (and validation) MLM loss of the run.",
        runs.EVAL_LOSS_PLOT: "Validation MLM loss per epoch.",
        runs.F1_VS_N_PLOT: "Mean best dev F1 against N.",
    }
    for name, caption in copies.items():
        if run_dir is not None and (run_dir / name).is_file():
            if runs.links_out_of(run_dir, [run_dir / name]):
                raise InputError(
                    f"{run_dir / name} is a symbolic link to {(run_dir / name).resolve()}, outside the run folder: "
                    "export copies only the run's own files"
                )
            shutil.copyfile(run_dir / name, out_dir / f"run_{name}")
            figures.append((f"run_{name}", caption))
    if not figures:
        return ""
    return "\n\n".join(f"![{caption}]({name})\n\n*{caption}*" for name, caption in figures)


def _architecture(model, templates_dir: Path, num_parameters: str) -> str:
    config, model_class = model.config, type(model).__name__
    if isinstance(model.base_model, LayerFusionModel):
        backbone = config.backbone_config
        fusion = FUSIONS[config.fusion]
        return _fill(
            templates_dir,
            "architecture_layer_fusion.md",
            backbone_type=backbone.model_type,
            backbone_layers=backbone.num_hidden_layers,
            backbone_hidden=backbone.hidden_size,
            fusion_name=fusion.name,
            fusion_description=fusion.description,
            backbone_training="frozen" if config.freeze_backbone else "trainable",
            model_class=model_class,
            num_parameters=num_parameters,
        )
    template = "architecture_elc_bert.md" if config.layer_combination == "elc" else "architecture_ltg_bert.md"
    fields = (
        "position_bucket_size",
        "elc_variant",
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
    )
    return _fill(
        templates_dir,
        template,
        model_class=model_class,
        num_parameters=num_parameters,
        **{field: getattr(config, field) for field in fields},
    )


# The papers a model rests on, as keys of model_cards/references.bib.
ELC_BERT_PAPERS = ("charpentier-samuel-2023-layers", "samuel-etal-2023-trained")
LTG_BERT_PAPERS = ("samuel-etal-2023-trained",)
DWATT_PAPER = "elnokrashy-etal-2024-depth"


def papers_of(model) -> list[str]:
    """The BibTeX keys of the papers behind `model`: ELC-BERT's (which builds on LTG-BERT) or LTG-BERT's, and for a
    layer-fusion model DWAtt's (the fusion heads' study) and its backbone's where that is one of ours."""
    config = model.config
    keys = []
    if isinstance(model.base_model, LayerFusionModel):
        keys.append(DWATT_PAPER)
        config = config.backbone_config
    if getattr(config, "model_type", None) == "elc_bert":
        keys += ELC_BERT_PAPERS if config.layer_combination == "elc" else LTG_BERT_PAPERS
    return keys


def _citation(model, templates_dir: Path) -> str:
    """The BibTeX entries of `papers_of(model)`, from the templates' references.bib (the package's own where a
    templates folder of one's own has none)."""
    path = templates_dir / "references.bib"
    if not path.is_file():
        path = TEMPLATES_DIR / "references.bib"
    entries = {}
    for entry in re.split(r"\n(?=@)", path.read_text(encoding="utf-8").strip()):
        match = re.match(r"@\w+\{([^,]+),", entry)
        if match is None:
            raise InputError(f"{path}: not a BibTeX entry: {entry[:60]!r}")
        entries[match.group(1)] = entry.strip()
    missing = [key for key in papers_of(model) if key not in entries]
    if missing:
        raise InputError(f"{path} has no entry {missing}")
    bibtex = "\n\n".join(entries[key] for key in papers_of(model))
    return (
        "If you use this model, please cite the papers it rests on (and the `elc_bert` package):\n\n"
        f"```bibtex\n{bibtex}\n```"
    )


def install_instructions() -> str:
    """How to install the package, which is not on PyPI: from its repository, as the package's metadata names it
    (pyproject.toml's `[project.urls]`), or from a clone (an install whose metadata names none, made before it did)."""
    try:
        urls = package_metadata("elc_bert").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("repository", "source", "homepage") and url.strip():
            return f'`pip install "elc_bert @ git+{url.strip()}"`, or `pip install -e .` in a clone'
    return "`pip install -e .` in a clone of its repository"


def _auto_class_name(model) -> str:
    for family in AUTO_CLASSES.values():
        for auto_class, model_class in family.items():
            if model_class is type(model):
                return auto_class.__name__
    raise InputError(f"{type(model).__name__} has no Auto class")


def pipeline_of(model) -> tuple[str, str]:
    """(the Hub's pipeline tag, the task's name) of the model's head."""
    class_name = type(model).__name__
    suffix = next((s for s in PIPELINE_TAGS if class_name.endswith(s)), None)
    return PIPELINE_TAGS.get(suffix, ("feature-extraction", "Feature extraction"))


def parameter_count(model) -> str:
    count = sum(p.numel() for p in model.parameters())
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e3:.0f}k"


def base_model(run: Run) -> str | None:
    """The Hub model a fine-tuning run (mlm, finetune-ner) started from, as its config names it: an id `owner/name`
    or an alias of one (`MODEL_ALIASES`); None for a local folder or a run that started from scratch."""
    if not isinstance(run.config, (MlmConfig, FinetuneNerConfig)):
        return None
    name = run.config.model
    if name in MODEL_ALIASES:
        return MODEL_ALIASES[name].hub_id
    return name if name.count("/") == 1 and _read_from_hub(run, name, named_on_hub=True) else None


def card_data(model, run: Run, title: str, license: str) -> tuple[ModelCardData, list[str]]:
    """The card's metadata (what the Hub reads: license, tags, pipeline, datasets, base model, model-index of the
    run's measured results) and the Markdown rows of those results."""
    pipeline_tag, task_name = pipeline_of(model)
    results, rows = measured_results(run, (pipeline_tag, task_name))
    is_fusion = isinstance(model.base_model, LayerFusionModel)
    tags = ["layer-fusion", model.config.fusion] if is_fusion else ["elc-bert", "ltg-bert"]
    if is_fusion and model.config.backbone_config.model_type == "elc_bert":
        tags.append("elc-bert")
    tags += [pipeline_tag, "custom_code"]
    training, evaluation = run_corpora(run)
    # Hub ids only: of the datasets read from the Hub, and of a known dataset read in full from local files
    datasets = [corpus.path for corpus in training + evaluation if corpus.on_hub]
    if isinstance(run.config, FinetuneNerConfig) and whole_ner_dataset(run):
        datasets.append(evaluation[0].dataset_id)
    datasets = list(dict.fromkeys(datasets))
    data = ModelCardData(
        license=license,
        language=["en"],
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=tags,
        datasets=datasets or None,
        base_model=base_model(run),
        model_name=title,
        eval_results=results or None,
    )
    return data, rows


def _results_text(run: Run, rows: list[str]) -> str:
    if run.left_out:
        return f"No evaluation results: the run's metrics were left out because {run.left_out}."
    if not rows:
        return "No evaluation results: the export was given no run that measured any."
    return f"Measured by the run in `{shown_path(run.dir)}`:\n\n| metric | value |\n|---|---|\n" + "\n".join(rows)


def _limitations(model, run: Run, templates_dir: Path, num_parameters: str) -> str:
    size_note = f"Small: {num_parameters} parameters"
    if isinstance(run.config, PretrainConfig):
        size_note += f", pretrained for {run.config.max_steps} optimizer steps"
    size_note += "; treat it as a research artefact, not a general-purpose language model."
    extra = []
    if isinstance(run.config, FinetuneNerConfig) and run.metrics:
        tested = any(isinstance(entry, dict) and "test_mean" in entry for entry in run.metrics.values())
        extra.append(
            "- The NER F1 scores are each trial's best dev-set epoch: model selection on the dev set makes them "
            + (
                "optimistic (the run's results.json holds test-set scores too)."
                if tested
                else "optimistic; no test-set score was measured."
            )
        )
    if isinstance(model.base_model, LayerFusionModel) and model.config.freeze_backbone:
        extra.append("- The backbone is frozen: only the fusion module and the head were trained.")
    return _fill(templates_dir, "limitations.md", size_note=size_note, extra_limitations="\n".join(extra))


def usage_snippet(model, repo_id: str, remote_code: bool) -> str:
    """The Python lines that load the model from `repo_id` and use it: its pipeline (`PIPELINE_EXAMPLES`), else its
    Auto class; `remote_code`: for transformers alone (the code shipped in the repo, `trust_remote_code=True`)."""
    trust = ", trust_remote_code=True" if remote_code else ""
    pipeline_tag, _ = pipeline_of(model)
    if pipeline_tag in PIPELINE_EXAMPLES:
        name, use = PIPELINE_EXAMPLES[pipeline_tag]
        options = PIPELINE_OPTIONS.get(pipeline_tag, "")
        return (
            "from transformers import pipeline\n\n"
            f'{name} = pipeline("{pipeline_tag}", model="{repo_id}"{options}{trust})\n{use}'
        )
    auto_class = _auto_class_name(model)
    return (
        f"from transformers import {auto_class}, AutoTokenizer\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}"{trust})\n'
        f'model = {auto_class}.from_pretrained("{repo_id}"{trust})' + AUTO_EXAMPLES.get(auto_class, "")
    )


def _usage(model, templates_dir: Path, repo_id: str | None, sentence_modules: list[str] | None) -> str:
    sentence_usage = ""
    if sentence_modules:
        sentence_usage = _fill(
            templates_dir,
            "usage_sentence.md",
            repo_id=repo_id or "USER/NAME",
            modules=", then ".join(["the token states", *sentence_modules]),
        )
    return _fill(
        templates_dir,
        "usage.md",
        snippet=usage_snippet(model, repo_id or "USER/NAME", remote_code=False),
        remote_snippet=usage_snippet(model, repo_id or "USER/NAME", remote_code=True),
        install=install_instructions(),
        sentence_usage=sentence_usage,
    )


def model_card(
    model,
    *,
    run_dir=None,
    run_model=None,
    repo_id=None,
    license="apache-2.0",
    templates_dir=None,
    out_dir: Path,
    source="",
    name=None,
    metrics_left_out=None,
    sentence_modules=None,
) -> ModelCard:
    """The model card (README.md) of `model`; writes the card's images into `out_dir`. `run_model`: where in
    `run_dir` the run saved the exported weights (`export.model_of_run`); `name`: the card's title without `repo_id`
    (default: the name of `out_dir`); `metrics_left_out`: why the card leaves out the run's metrics (its results,
    model-index and plots), the rest of what the run says (how it trained, on what) staying; `sentence_modules`:
    the sentence-transformers modules after the transformer when the folder is a sentence-transformers one too."""
    templates_dir = Path(templates_dir) if templates_dir is not None else TEMPLATES_DIR
    run = read_run(Path(run_dir) if run_dir is not None else None)
    if metrics_left_out:
        run = dataclasses.replace(run, metrics={}, left_out=metrics_left_out)
    title = repo_id.split("/")[-1] if repo_id else (name or out_dir.name)
    num_parameters = parameter_count(model)
    data, rows = card_data(model, run, title, license)
    _, task_name = pipeline_of(model)
    code_files = ", ".join(sorted(p.name for p in out_dir.glob("*.py")))
    text = _fill(
        templates_dir,
        "model_card.md",
        metadata=data.to_yaml(),
        title=title,
        summary=f"{task_name} model ({type(model).__name__}, {num_parameters} parameters) built with the `elc_bert` "
        "package.",
        architecture=_architecture(model, templates_dir, num_parameters),
        training=_training_text(run, str(source), run_model),
        results=_results_text(run, rows),
        figures=_figures(model, run, out_dir),
        usage=_usage(model, templates_dir, repo_id, sentence_modules),
        limitations=_limitations(model, run, templates_dir, num_parameters),
        citation=_citation(model, templates_dir),
        package_version=elc_bert.__version__,
        transformers_version=transformers.__version__,
        source=shown_path(source),
        code_files=code_files,
    )
    return ModelCard(text + "\n")


@torch.no_grad()
def write_model_card(out_dir: Path, model, **kwargs) -> Path:
    """Writes README.md (and its images) into `out_dir`; keyword arguments as for `model_card`."""
    out_dir = Path(out_dir)
    path = out_dir / "README.md"
    model_card(model, out_dir=out_dir, **kwargs).save(path)
    return path

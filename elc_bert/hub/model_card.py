"""The README.md (model card) of an exported folder, filled from the templates in `model_cards/` with the model and
what its run measured and read (`job_configs.Run`, which asks the run's config class).

Only what the run measured is written (`Run.measures`), nothing is derived or filled in, and the data is
named as the run's saved config names it (local files by their path in the text, and in the model-index by the id of
the dataset they copy, never a path; Hub datasets by their id). Without a run directory, or with the run's metrics
left out, the card has no results and says why.
"""

import logging
import re
import shutil
from importlib.metadata import PackageNotFoundError
from importlib.metadata import metadata as package_metadata
from pathlib import Path
from string import Template
from urllib.parse import urlsplit

import torch
import transformers
from huggingface_hub import EvalResult, ModelCard, ModelCardData

import elc_bert
from elc_bert import plots, runs
from elc_bert.intervals import mean_and_interval
from elc_bert.job_configs import Measure, Run, read_run, shown_path
from elc_bert.job_configs.ner_results import mean_depth_profiles
from elc_bert.models import AUTO_CLASSES, FUSIONS, ElcBertModel, LayerFusionModel

from ..models.errors import InputError, InputNotFoundError

TEMPLATES_DIR = Path(__file__).parent / "model_cards"  # a link to the repo's model_cards/; a folder in the wheel
# What works while no repository URL is recorded: the package is not on PyPI.
CLONE_INSTALL = (
    "`pip install .` in a clone of its repository, or `pip install dist/elc_bert-*.whl` with a wheel built there "
    "(`pip wheel --no-deps -w dist .`)"
)

logger = logging.getLogger(__name__)

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


def _fill(templates_dir: Path, name: str, **values) -> str:
    path = templates_dir / name
    if not path.is_file():
        raise InputNotFoundError(f"model card template {path} is missing (templates_dir={templates_dir})")
    try:
        return Template(path.read_text(encoding="utf-8")).substitute(**values).strip()
    except KeyError as error:
        raise KeyError(f"{path}: no value for ${error.args[0]}") from None


def _index_entry(task: tuple[str, str], measure: Measure) -> EvalResult:
    """The model-index entry of `measure`, for the model's task (pipeline tag, name)."""
    return EvalResult(
        task_type=task[0],
        task_name=task[1],
        dataset_type=measure.corpus.index_type,
        dataset_name=measure.corpus.name,
        dataset_config=measure.corpus.config,
        dataset_split=measure.split,
        metric_type=measure.kind,
        metric_name=measure.name,
        metric_value=measure.value,
    )


def _table_row(measure: Measure) -> str:
    """The Markdown row of `measure`: its value, or a mean over trials with its interval and the trials' values."""
    name = measure.shown_as or measure.name
    if measure.trials is None:
        return f"| {name} | {measure.value:.4f} |"
    per_trial = ", ".join(f"{100 * value:.1f}" for value in measure.trials)
    return f"| {name} | {mean_and_interval(measure.value, measure.half_width)} ({per_trial}) |"


def measured_results(run: Run, task: tuple[str, str]) -> tuple[list[EvalResult], list[str]]:
    """The model-index results and the Markdown table rows of what the run measured (and nothing else): a measure
    over the training run has a row, no model-index entry."""
    found = run.measures()
    results = [_index_entry(task, measure) for measure in found if measure.corpus is not None]
    return results, [_table_row(measure) for measure in found]


def _training_text(run: Run, model_dir: str, run_model: str | None) -> str:
    """What the run did, on which data (its config class says); `run_model`: where in the run the exported weights
    were saved."""
    if run.config is None:
        return "No run directory was given to the export, so this card records no training details and no results."
    training, _ = run.corpora()
    data = "; ".join(map(str, training)) or "data the run's config does not name"
    return run.config.training_text(run, data, run_model, model_dir)


def _figures(model, run: Run, out_dir: Path) -> str:
    figures = []
    base = model.base_model
    backbone = base.backbone if isinstance(base, LayerFusionModel) else base
    if isinstance(backbone, ElcBertModel) and backbone.encoder.elc:
        plots.plot_layer_weights(out_dir / "alpha.png", {"ELC layer weights alpha": backbone.layer_weights().tolist()})
        caption = "ELC layer weights: row n is softmax(theta^(n)), how much block n reads of each earlier state."
        figures.append(("alpha.png", caption))
    run_dir = None if run.left_out else run.dir  # the run's plots are measurements too
    recorded = mean_depth_profiles(run_dir) if run_dir is not None else {}  # none but a finetune-ner run's
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
    (pyproject.toml's `[project.urls]`, where a repository's URL is set), else from a clone or a wheel built in one.
    A `.invalid` host (RFC 2606: never resolves; an install made while pyproject.toml held a placeholder) is skipped."""
    try:
        urls = package_metadata("elc_bert").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        url = url.strip()
        if label.strip().lower() not in ("repository", "source", "homepage") or not url:
            continue
        if (urlsplit(url).hostname or ".invalid").endswith(".invalid"):
            logger.warning("the installed package's metadata names %s, which cannot resolve: not put on the card", url)
            continue
        return f'`pip install "elc_bert @ git+{url}"`, or `pip install .` in a clone'
    return CLONE_INSTALL


def _auto_class_name(model) -> str:
    for family in AUTO_CLASSES.values():
        for auto_class, model_class in family.items():
            if model_class is type(model):
                return auto_class.__name__
    raise InputError(f"{type(model).__name__} has no Auto class")


def pipeline_of(model) -> tuple[str, str]:
    """(the Hub's pipeline tag, the task's name) of the model's head."""
    class_name = type(model).__name__
    tags = (tag for suffix, tag in PIPELINE_TAGS.items() if class_name.endswith(suffix))
    return next(tags, ("feature-extraction", "Feature extraction"))


def parameter_count(model) -> str:
    count = sum(p.numel() for p in model.parameters())
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e3:.0f}k"


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
    training, evaluation = run.corpora()
    # Hub ids only: of the datasets read from the Hub, and of a known dataset read in full from local files
    datasets = list(dict.fromkeys(corpus.listed_id for corpus in training + evaluation if corpus.listed_id))
    data = ModelCardData(
        license=license,
        language=["en"],
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=tags,
        datasets=datasets or None,
        base_model=run.base_model,
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
    trained, extra = run.config.limitations(run) if run.config is not None else ("", [])
    size_note = (
        f"Small: {num_parameters} parameters{trained}; treat it as a research artefact, not a general-purpose "
        "language model."
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
    repo_id = repo_id or "USER/NAME"
    sentence_usage = ""
    if sentence_modules:
        modules = ", then ".join(["the token states", *sentence_modules])
        sentence_usage = _fill(templates_dir, "usage_sentence.md", repo_id=repo_id, modules=modules)
    return _fill(
        templates_dir,
        "usage.md",
        snippet=usage_snippet(model, repo_id, remote_code=False),
        remote_snippet=usage_snippet(model, repo_id, remote_code=True),
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
        run = run.without_metrics(metrics_left_out)
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
    path = Path(out_dir) / "README.md"
    model_card(model, out_dir=path.parent, **kwargs).save(path)
    return path

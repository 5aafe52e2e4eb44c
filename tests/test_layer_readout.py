"""`scripts/layer_readout.py`: ELC-BERT's alpha readout and its rank correlations (issue 69, part 6)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "layer_readout.py"


@pytest.fixture(scope="module")
def layer_readout():
    spec = importlib.util.spec_from_file_location("layer_readout", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def uniform_alpha(layers: int) -> list[list[float]]:
    alpha = np.zeros((layers, layers + 1))
    for n in range(layers):
        alpha[n, : n + 1] = 1 / (n + 1)
    return alpha.tolist()


def test_readout_is_the_mean_weight_later_blocks_put_on_a_layer(layer_readout):
    # 3 blocks: row n weighs y_0..y_n; layer 0's output y_1 is read by blocks 1 and 2, layer 1's y_2 by block 2.
    alpha = [[1.0, 0.0, 0.0, 0.0], [0.2, 0.8, 0.0, 0.0], [0.1, 0.3, 0.6, 0.0]]
    assert layer_readout.readout(alpha) == pytest.approx([(0.8 + 0.3) / 2, 0.6], abs=1e-12)
    assert layer_readout.readout(alpha, vs_uniform=True) == pytest.approx([(2 * 0.8 + 3 * 0.3) / 2, 3 * 0.6], abs=1e-12)
    # a uniform alpha favours early layers by position alone; relative to uniform every layer is 1
    assert np.all(np.diff(layer_readout.readout(uniform_alpha(8))) < 0)
    assert layer_readout.readout(uniform_alpha(8), vs_uniform=True) == pytest.approx([1.0] * 7, abs=1e-12)


def report(alpha, losses, areas, steps_to_recover, steps=20):
    return {
        "model": "m",
        "sentences": 4,
        "depth_profiles": {"alpha": alpha},
        "leave_one_out": {"baseline": 5.0, "layers": [{"metric": loss} for loss in losses]},
        "recovery": {
            "settings": {"steps": steps},
            "layers": [{"area": a, "steps_to_recover": s} for a, s in zip(areas, steps_to_recover)],
        },
    }


def test_layer_table_leaves_the_last_layer_out_and_ranks_unrecovered_last(layer_readout):
    table = layer_readout.layer_table(report(uniform_alpha(4), [5.5, 5.1, 5.3, 9.0], [1, 2, 3, 4], [3, None, 0, 1]))
    assert table["loo_increase"] == pytest.approx([0.5, 0.1, 0.3], abs=1e-12)
    assert table["recovery_area"] == [1, 2, 3]
    assert table["steps_to_recover"] == [3, 21, 0]


def test_pooled_rho_is_the_mean_of_the_seeds_with_an_interval(layer_readout):
    bootstrap = {"resamples": 200, "confidence": 0.95, "seed": 0}
    up = {"use": [0.1, 0.2, 0.3, 0.4, 0.5], "loo_increase": [1.0, 2.0, 3.0, 4.0, 5.0], "flat": [1, 1, 1, 1, 1]}
    down = {**up, "loo_increase": [5.0, 4.0, 3.0, 2.0, 1.0]}
    same = layer_readout.pooled_rho([up, up], "use", "loo_increase", bootstrap)
    assert same["rho"] == pytest.approx(1.0, abs=1e-12)
    assert same["interval"][1] == pytest.approx(1.0, abs=1e-12) and same["interval"][0] <= 1.0
    mixed = layer_readout.pooled_rho([up, down], "use", "loo_increase", bootstrap)
    assert mixed["rho"] == pytest.approx(0.0, abs=1e-12)
    assert [row["rho"] for row in mixed["per_seed"]] == pytest.approx([1.0, -1.0], abs=1e-12)
    tied = layer_readout.pooled_rho([up], "use", "flat", bootstrap)  # e.g. no layer recovered: no ranking
    assert tied["per_seed"] == [{"rho": None, "interval": None}]

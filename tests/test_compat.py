"""Remote code on older transformers (issue 39): what the package saves loads where `elc_bert` cannot be imported, on
the transformers the BabyLM 2025 evaluation pipeline pins (4.51.3), with the package's logits and token ids, and the
exported models' cards' snippets (their pipelines) run there.

`scripts/compat_matrix.py` runs the whole matrix (4.46 to the pinned version); this test runs its 4.51.3 row, in a
`pip install --target` folder under .venv/compat (installed on first use).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_exports_and_plain_saves_load_on_transformers_4_51(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "compat_matrix.py"), "--versions", "4.51.3", "--json", "report.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert (tmp_path / "report.json").is_file(), result.stdout + result.stderr[-4000:]
    (report,) = json.loads((tmp_path / "report.json").read_text())
    assert report["transformers"] == "4.51.3"
    cases = {name: entry for name, entry in report.items() if name != "transformers"}
    assert set(cases) == {
        "ELC-BERT MLM",
        "ELC-BERT MLM, plain save_pretrained",
        "LTG-BERT token classifier",
        "DWAtt fusion over ELC-BERT",
    }
    for name, entry in cases.items():
        assert "error" not in entry, (name, entry)
        assert entry["module"].startswith("transformers_modules."), (name, entry)  # the shipped code, not ours
        assert entry["ids_equal"] and entry["max_abs_diff"] <= 1e-5, (name, entry)
    # The cards' own snippets for transformers alone (fill-mask and token-classification pipelines with
    # trust_remote_code=True) run on the exported folders; a plain save has no card.
    for name, entry in cases.items():
        assert entry.get("snippet") == (None if "plain" in name else "ok"), (name, entry)
    assert result.returncode == 0, result.stdout

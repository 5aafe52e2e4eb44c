"""The remote code that every save ships (`register_for_auto_class`: `save_pretrained` copies the package's model files
beside the weights, and `elc-bert export` saves through it): the package's own files, byte for byte, so that there is
one source of truth, and each entry file names every model file it needs.
"""

from helpers import REPO


def test_remote_code_is_the_package_source(exported):
    """One source of truth: each shipped file is the package's model file as it is."""
    folder = exported[0]["fusion_elc_dwatt"]
    shipped = sorted(folder.glob("*.py"))
    assert shipped
    for path in shipped:
        assert path.read_text() == (REPO / "elc_bert" / "models" / path.name).read_text(), path.name


def _relative_imports(path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text())
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}


def test_each_entry_file_imports_every_model_file_it_needs_itself():
    """transformers before 5 copies a remote-code entry file's own relative imports into its module cache, not
    theirs in turn (a file missing there fails to load on 4.51: `tests/test_compat.py`): each modeling and
    configuration file (the `auto_map` entries) names every model file it needs, transitively, itself."""
    models = REPO / "elc_bert" / "models"
    for entry in sorted(models.glob("modeling_*.py")) + sorted(models.glob("configuration_*.py")):
        direct = _relative_imports(entry)
        needed, queue = set(), list(direct)
        while queue:
            module = queue.pop()
            if module not in needed:
                needed.add(module)
                queue.extend(_relative_imports(models / f"{module}.py"))
        assert needed <= direct, (entry.name, sorted(needed - direct))

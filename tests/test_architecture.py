"""The codebase's structure: the library (zoo) never imports the trainer (training), no import loops, one package
per paper with the paper's module names, no file over 600 lines, no private-name imports, a short README."""

import ast
import re
import subprocess
import sys
from pathlib import Path


def test_library_does_not_import_the_trainer():
    code = (
        "import sys, zoo, zoo.cli, zoo.judges, zoo.pipeline, zoo.synthetic, zoo.convert;"
        "import zoo.methods.dbaf, zoo.methods.hford, zoo.methods.ifadit, zoo.methods.personal, zoo.methods.ideudemon;"
        "import zoo.face3d.shape_space, zoo.nn.sface, zoo.nn.dcgan, zoo.nn.mobilestylegan, zoo.nn.faceres, zoo.convert.tfjs_graph, zoo.inversion;"
        "zoo.convert.list_converters();"
        "bad = sorted(m for m in sys.modules if m == 'training' or m.startswith('training.'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


ROOT = Path(__file__).resolve().parent.parent
PROJECT_DIRS = ("zoo", "training", "benchmarks", "app")
#: each paper's modules, by the paper's names, defined in its own package
PAPER_MODULES = {
    "dbaf": ("CID", "KRIA", "MAAR"),
    "hford": ("IDM", "CMLPs", "ARM"),
    "ifadit": ("SIF", "ICL", "LatentMapper", "keygen_vectors"),
    "personal": ("rotate_identity", "unrotate_identity", "PasswordReferences"),
    "ideudemon": ("id_noise", "hybrid_image", "IDEudemonStepOne"),
}


def _sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Project modules ``path`` imports anywhere in it (module level or inside functions)."""
    name, is_package = _module_name(path), path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def test_no_file_in_the_library_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in _sources("zoo") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_the_library_has_no_import_loop():
    """No cycle among zoo's modules, counting the imports inside functions too."""
    files = {_module_name(p): p for p in _sources("zoo")}
    graph = {m: _imports(p, set(files)) for m, p in files.items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, "import loop: " + " -> ".join(path[path.index(n) :] + [m, n]) if n in path else n
            if n not in state:
                visit(n, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_each_paper_package_holds_its_modules_under_the_papers_names():
    for method, names in PAPER_MODULES.items():
        package = ROOT / "zoo" / "methods" / method
        assert (package / "__init__.py").is_file(), method
        defined = set()
        for path in package.glob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                    defined.add(node.name)
                elif isinstance(node, ast.Assign):
                    defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        assert set(names) <= defined, (method, sorted(set(names) - defined))


def test_methods_register_themselves_with_the_decorator():
    import zoo
    from zoo.registry import _REGISTRY  # noqa: PLC2701 - the test reads the registry it checks

    names = zoo.list_methods()
    assert {"blur", "pixelate", "noise", "mask", "dbaf", "hford", "ifadit", "personal", "ideudemon"} <= set(names)
    for name in ("dbaf", "hford", "ifadit", "personal", "ideudemon"):
        assert _REGISTRY[name].target.startswith(f"zoo.methods.{name}."), _REGISTRY[name]


def test_no_module_imports_another_modules_private_names():
    modules = {_module_name(p) for p in _sources(*PROJECT_DIRS)} | {"space_app"}
    bad = []
    for path in _sources(*PROJECT_DIRS) + [ROOT / "space_app.py"]:
        name = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in {m.split(".")[0] for m in modules}):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    bad.append(f"{name}: from {'.' * node.level}{node.module or ''} import {', '.join(private)}")
    assert not bad, bad


def test_nothing_edits_sys_path():
    bad = [str(p.relative_to(ROOT)) for p in _sources(*PROJECT_DIRS, "tests") if "sys.path.insert" in p.read_text() and p.name != "test_architecture.py"]
    assert not bad, bad


def test_readme_is_short_and_its_pictures_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    pictures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme) + re.findall(r'<img [^>]*src="([^"]+)"', readme)
    assert pictures, "the README shows a result"
    missing = [p for p in pictures if not p.startswith("http") and not (ROOT / p).is_file()]
    assert not missing, missing


def test_docs_describe_the_software_not_its_history():
    stop = re.compile(r"\bstop \d+\b", re.IGNORECASE)
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "hub_cards").rglob("*"), *_sources(*PROJECT_DIRS)]
    bad = [str(p.relative_to(ROOT)) for p in texts if p.is_file() and stop.search(p.read_text(errors="ignore"))]
    assert not bad, bad

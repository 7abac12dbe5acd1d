"""A drawing of the imports between Malamar's packages (issue 17, "Done when").

Parses every module (ast, function-level imports included, migrations left out) and prints the
package → package graph, each edge with the modules that make it, then the layering rules of
DESIGN.md ("Layout", "App order") and whether they hold. tests/test_layering.py asserts them.

    .venv/bin/python bench/imports.py
"""

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The packages bottom to top (issue 27, "Apps in one order"): each imports only the ones before
# it. core: ids, config, events; runner: the runs domain (queue items, runs, CLI health and
# limits, the CLI registry and classes); the apps (notifications under those whose rules notify:
# a task pass's errors and reviews, a CLI's limit); the worker, which runs what they queue; the
# site layer (settings, urls, the API, the pages that put several apps together).
ORDER = (
    "core",
    "runner",
    "workspaces",
    "notifications",
    "agents",
    "tasks",
    "chats",
    "worker",
    "malamar_site",
)
PACKAGES = ORDER
APPS = ("workspaces", "agents", "tasks", "chats", "runner", "notifications")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "chats.views"
    target: str  # the imported module, e.g. "workspaces.views"
    line: int
    in_function: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        package = module.split(".")
        if not is_package:
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    # `from worker import process` imports the module worker.process; `from runner.models
    # import Run` imports runner.models.
    submodules = [f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")]
    return submodules or [base]


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _in_function(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            ids.update(id(child) for child in ast.walk(node) if child is not node)
    return ids


def _type_checking_only(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return ids


def project_modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def all_imports() -> list[Import]:
    """Every import of a project module by a project module (TYPE_CHECKING blocks left out)."""
    found = []
    for path in project_modules():
        module = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        nested, typing_only = _in_function(tree), _type_checking_only(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            for target in _targets(node, module, is_package):
                if target.split(".")[0] in PACKAGES:
                    found.append(Import(module, target, node.lineno, id(node) in nested))
    return found


def package_of(module: str) -> str:
    return module.split(".")[0]


def violations(imports: list[Import]) -> dict[str, list[Import]]:
    """The DESIGN.md layering rules, each with the imports that break it."""
    rules: dict[str, list[Import]] = {
        f"each package imports only the ones below it: {' < '.join(ORDER)}": [],
        "no app imports another app's views": [],
        "selectors never import services": [],
    }
    names = list(rules)
    for imp in imports:
        source, target = package_of(imp.module), package_of(imp.target)
        if ORDER.index(target) > ORDER.index(source):
            rules[names[0]].append(imp)
        if source != target and source in APPS and imp.target.split(".")[1:2] == ["views"]:
            rules[names[1]].append(imp)
        if imp.module.split(".")[-1] == "selectors" and imp.target.split(".")[-1] == "services":
            rules[names[2]].append(imp)
    return rules


def graph(imports: list[Import]) -> dict[tuple[str, str], set[str]]:
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for imp in imports:
        source, target = package_of(imp.module), package_of(imp.target)
        if source != target:
            edges[(source, target)].add(f"{imp.module} → {imp.target.rsplit('.', 1)[-1]}")
    return edges


def _short(imp: Import) -> str:
    where = " (in a function)" if imp.in_function else ""
    return f"{imp.module}:{imp.line} imports {imp.target}{where}"


def main() -> int:
    imports = all_imports()
    print("Package → package imports (DESIGN.md Layout)\n")
    for (source, target), via in sorted(graph(imports).items()):
        print(f"  {source:>13} → {target:<13} {len(via):>3} module edge(s)")
    nested = sorted({_short(i) for i in imports if i.in_function})
    print(f"\nFunction-level imports of project modules: {len(nested)}")
    for line in nested:
        print(f"  {line}")
    print("\nRules")
    broken = 0
    for rule, found in violations(imports).items():
        print(f"  [{'ok' if not found else 'BROKEN'}] {rule}")
        for imp in found:
            print(f"      {_short(imp)}")
        broken += len(found)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

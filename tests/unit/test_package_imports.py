"""The dependency rules of DESIGN §8 that the layout alone does not enforce: no product module
imports the test tree, `common` imports no other package of the project, and the oracle
(docs/queries.md computed independently) imports `common` only, never the query service's code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("common", "services", "healthchecker", "client", "spark", "oracle", "scripts",
                    "tests")
PRODUCT_PACKAGES = PROJECT_PACKAGES[:-1]
ALLOWED = {"common": {"common"}, "oracle": {"common", "oracle"}}


def imported_packages(path: Path) -> set[str]:
    """The project's top-level packages `path` imports (at any depth of the module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(PROJECT_PACKAGES)
    return found


def modules_of(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", PRODUCT_PACKAGES)
def test_no_product_module_imports_the_tests(package):
    modules = modules_of(package)
    assert modules, f"{package}/ has no modules: the test would prove nothing"
    offenders = [str(path.relative_to(REPO)) for path in modules
                 if "tests" in imported_packages(path)]
    assert offenders == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_it_may(package):
    offenders = {str(path.relative_to(REPO)): sorted(imported_packages(path) - ALLOWED[package])
                 for path in modules_of(package)}
    assert {path: extra for path, extra in offenders.items() if extra} == {}

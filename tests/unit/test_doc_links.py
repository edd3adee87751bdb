"""Every relative link in README.md and docs/*.md points to a file of this repository, and none
points outside it."""

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _relative_targets(document: Path) -> list[str]:
    targets = MARKDOWN_LINK.findall(document.read_text(encoding="utf-8"))
    return [t for t in targets if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]


def test_every_relative_link_resolves_inside_the_repository():
    broken = []
    for document in _documents():
        for target in _relative_targets(document):
            path = (document.parent / target.split("#", 1)[0]).resolve()
            if not path.exists() or REPO_ROOT not in (path, *path.parents):
                broken.append(f"{document.relative_to(REPO_ROOT)}: {target}")
    assert broken == []


def test_no_document_points_at_the_shared_handbook_outside_the_repository():
    outside = [str(d.relative_to(REPO_ROOT)) for d in _documents()
               if "../shared/" in d.read_text(encoding="utf-8")]
    assert outside == []

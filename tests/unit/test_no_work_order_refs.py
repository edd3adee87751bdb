"""No tracked text file cites a work order (an issue, a finding, a stop) by its number: such a
number means nothing to a reader of this repository. A comment says why instead, or points at
a docs section."""

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".j2", ".yaml", ".sh", ".toml"}
TEXT_NAMES = {"Makefile"}
# Built from parts so that this file does not match its own pattern.
_WORDS = "|".join(["[Ii]" + "ssue", "[Ff]" + "inding", "[Ss]" + "top"])
WORK_ORDER_REF = re.compile(r"\b(" + _WORDS + r") ?#?[0-9]+")


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    paths = [REPO_ROOT / name for name in listed if name]
    return [p for p in paths if (p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES)
            and p.is_file()]


def test_no_tracked_text_file_cites_a_work_order_number():
    found = []
    for path in _tracked_text_files():
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, start=1):
            if WORK_ORDER_REF.search(line):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)

"""The page of security and fault cases (docs/security-cases.md) names, for each case the
release checklist (shared with every release) lists, the tests that prove it. A renamed
or deleted test would leave a case proven on paper only: every test the page names must
exist, and every case must have its row.
"""

from __future__ import annotations

import re

from helpers import ROOT

PAGE = ROOT / "docs" / "security-cases.md"
# `test_file.py`, `test_file.py::name[params]` or `::name` (the file named last before it);
# a file is named without its folder (tests/api/, tests/core/...): test file names are unique.
REFERENCE = re.compile(r"`(test_\w+\.py)(?:::(\w+))?(?:\[[^\]`]*\])?`|`::(\w+)(?:\[[^\]`]*\])?`")


def rows() -> dict[int, str]:
    found = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| (\d+) \|", line)
        if match:
            found[int(match.group(1))] = line.split("|")[3]
    return found


def test_every_case_has_one_row_and_the_count_is_said():
    numbers = list(rows())
    assert numbers == list(range(1, len(numbers) + 1))
    assert f"Every release must pass the {len(numbers)} cases below." in PAGE.read_text()


def test_every_test_a_case_names_exists():
    missing = []
    for number, cell in rows().items():
        current = None
        for match in REFERENCE.finditer(cell):
            current = match.group(1) or current
            name = match.group(2) or match.group(3)
            path = next((ROOT / "tests").rglob(str(current)), None)
            if current is None or path is None:
                missing.append(f"case {number}: {current}")
            elif name and not re.search(rf"^(async )?def {name}\b", path.read_text(), re.M):
                missing.append(f"case {number}: {current}::{name}")
    assert not missing, missing

"""The stored key that sorts client emails in natural order: bulk1, bulk2, bulk10.

Sorting, paging and counting clients run in SQL on SQLite, PostgreSQL and MariaDB
(invariant 9), and no SQL function splits numbers out of text the same way on all
three. So the key is made here, once per write, and stored beside the email: each run
of digits loses its leading zeros and is prefixed with its length in three digits, so
comparing keys character by character compares numbers by value (a shorter number is
smaller) and everything else as the email key itself. The column is compared bytewise
on every backend (SQLite's BINARY, MySQL's utf8mb4_bin, PostgreSQL's "C" collation on
the column), so the three agree, and an index on it serves a page without a sort.
"""

from __future__ import annotations

import re

ORDER_MAX = 255
DIGITS = re.compile(r"[0-9]+")


def natural_order(email_key: str) -> str:
    """The sort key of an email key (already folded): `bulk10` -> `bulk00210`. Keys longer
    than ORDER_MAX are cut there; clients whose keys agree that far sort by id."""
    return DIGITS.sub(_number, email_key)[:ORDER_MAX]


def _number(match: re.Match) -> str:
    digits = match.group().lstrip("0") or "0"
    return f"{len(digits):03d}{digits}"

"""The README's settings reference, generated from the settings table.

`python -m appliance.services.admin.settings_doc` prints the reference; with `--write`
it replaces the part of ./README.md between the two marker comments. A test compares
that part with this output, so the documentation cannot drift from the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.services.admin.settings_rules import OneOf, Range
from appliance.services.admin.settings_table import SECTIONS, SETTINGS, Setting

START = "<!-- settings:start -->"
END = "<!-- settings:end -->"
REGENERATE = "python -m appliance.services.admin.settings_doc --write"


def reference() -> str:
    """The Markdown between the markers, markers included: a table per section."""
    lines = [
        START,
        "<!-- Generated from appliance/services/admin/settings_table.py by",
        f"     `{REGENERATE}`: edit the table, not this text. -->",
    ]
    for section, title in SECTIONS.items():
        lines += ["", f"### {title}", "", "| Setting | Default | Type | What it does |"]
        lines.append("|---|---|---|---|")
        for setting in SETTINGS:
            if setting.section == section:
                lines.append(
                    f"| `{setting.name}` | {_default(setting)} | {_kind(setting)} "
                    f"| {_help(setting)} |"
                )
    lines += ["", END]
    return "\n".join(lines)


def replace_reference(text: str) -> str:
    """`text` (a README) with its reference section regenerated."""
    start, end = text.index(START), text.index(END) + len(END)
    return text[:start] + reference() + text[end:]


def _default(setting: Setting) -> str:
    value = setting.default
    if value == "":
        return "empty"
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    return f"`{shown}`"


def _kind(setting: Setting) -> str:
    if setting.kind is bool:
        return "true/false"
    if isinstance(setting.rule, Range):
        return f"integer, {setting.rule}"
    if isinstance(setting.rule, OneOf):
        return f"one of {setting.rule}"
    if setting.secret:
        return "text, secret"
    return "integer" if setting.kind is int else "text"


def _help(setting: Setting) -> str:
    text = setting.help.replace("|", "\\|")
    return text + " *Applies after a restart.*" if setting.restart else text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help="regenerate the section in ./README.md"
    )
    if not parser.parse_args(argv).write:
        print(reference())
        return 0
    readme = Path("README.md")
    readme.write_text(replace_reference(readme.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

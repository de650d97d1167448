"""The settings documentation is the settings table: the README's reference is generated
from it, every setting explains itself, and the CLI describes its flags with the same
sentences. A setting added to the table without regenerating the README fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env

from appliance.services.admin.settings_doc import END, REGENERATE, START, reference
from appliance.services.admin.settings_table import BY_NAME, SECTIONS, SETTINGS

README = ROOT / "README.md"


def test_the_readme_settings_reference_is_generated_from_the_table():
    text = README.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1, "README.md lost its markers"
    section = text[text.index(START) : text.index(END) + len(END)]
    assert section == reference(), (
        "README.md's settings reference differs from the settings table; "
        f"regenerate it at the checkout's root with: .venv/bin/{REGENERATE}"
    )


def test_the_reference_lists_every_setting_once_with_its_help():
    rows = re.findall(r"^\| `(\w+)` \|.*\| (.+) \|$", reference(), re.MULTILINE)
    assert [name for name, _ in rows] == sorted(
        (s.name for s in SETTINGS), key=lambda name: list(SECTIONS).index(BY_NAME[name].section)
    )
    for name, help_cell in rows:
        assert help_cell.startswith(BY_NAME[name].help)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: setting.name)
def test_every_setting_has_a_help_sentence_a_section_and_a_valid_default(setting):
    assert re.fullmatch(r"[A-Z][^\n%|]{10,}\.", setting.help), setting.help
    assert setting.section in SECTIONS
    assert setting.kind in (bool, int, str)
    if setting.rule is not None:
        assert setting.rule(setting.name, setting.default) == setting.default


def test_names_are_unique_and_only_the_two_secrets_are_secret():
    assert len(BY_NAME) == len(SETTINGS)
    secrets = {setting.name for setting in SETTINGS if setting.secret}
    assert secrets == {"tgBotToken", "smtpPassword"}
    assert all(BY_NAME[name].default == "" for name in secrets)


def test_setting_set_describes_its_flags_with_the_table_help():
    result = subprocess.run(
        [sys.executable, "-m", "appliance", "setting", "set", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(COLUMNS="1000"),
    )
    assert result.returncode == 0, result.stderr
    shown = " ".join(result.stdout.split())
    flags = dict(re.findall(r"(--[\w-]+) VALUE (\w+): ", shown))
    assert flags == {
        "--port": "webPort",
        "--base-path": "webBasePath",
        "--listen": "webListen",
        "--allowed-hosts": "webAllowedHosts",
        "--cert-file": "webCertFile",
        "--key-file": "webKeyFile",
    }
    for flag, key in flags.items():
        assert f"{flag} VALUE {key}: {BY_NAME[key].help}" in shown


def test_the_readme_names_every_folder_of_tests_and_no_other():
    """The README's table of test folders is where a newcomer looks for a test: a folder
    added or renamed without it would hide its tests."""
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `tests/(\w+)/` \|", text, re.M))
    folders = {path.parent.name for path in (ROOT / "tests").glob("*/test_*.py")}
    assert named == folders

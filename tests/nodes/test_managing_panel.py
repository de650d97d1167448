"""Which panel manages a node, against a real SQLite store and a clock the test moves:
the first panel to call keeps the node until it has been silent for RELEASE_SECONDS,
across a restart of the node too. tests/nodes/test_nodes_api.py shows the same with real panels.
"""

from __future__ import annotations

import pytest

from appliance.runtime.changes import ChangeNotice
from appliance.runtime.file_paths import FilePlaces
from appliance.services.admin.settings import Settings
from appliance.services.nodes.parent import RELEASE_SECONDS, ManagingPanel
from appliance.store import Store

FIRST = "00000000-0000-4000-8000-00000000000a"
SECOND = "00000000-0000-4000-8000-00000000000b"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def node(tmp_path):
    """A node's settings on a real store, and a way to (re)start its ManagingPanel."""
    store = Store(str(tmp_path / "panel.db"))
    store.open()
    clock = Clock()

    def start() -> ManagingPanel:
        settings = Settings(store, FilePlaces(str(tmp_path)), ChangeNotice())
        settings.load()
        return ManagingPanel(settings, clock)

    yield start, clock
    store.close()


def test_the_first_caller_keeps_the_node_while_it_keeps_calling(node):
    start, clock = node
    panel = start()
    assert panel.guid() == ""
    panel.called_by(FIRST.upper())
    assert panel.guid() == FIRST
    for _ in range(10):
        clock.now += RELEASE_SECONDS / 2
        panel.called_by(SECOND)
        assert panel.guid() == FIRST
        panel.called_by(FIRST)
    assert start().guid() == FIRST


def test_another_panel_takes_over_after_the_first_falls_silent(node):
    start, clock = node
    panel = start()
    panel.called_by(FIRST)
    clock.now += RELEASE_SECONDS - 1
    panel.called_by(SECOND)
    assert panel.guid() == FIRST
    clock.now += 2
    panel.called_by(SECOND)
    assert panel.guid() == SECOND
    clock.now += 1
    panel.called_by(FIRST)
    assert panel.guid() == SECOND


def test_a_restarted_node_waits_the_same_silence(node):
    start, clock = node
    start().called_by(FIRST)
    clock.now += RELEASE_SECONDS * 10
    restarted = start()
    restarted.called_by(SECOND)
    assert restarted.guid() == FIRST
    clock.now += RELEASE_SECONDS + 1
    restarted.called_by(SECOND)
    assert restarted.guid() == SECOND


@pytest.mark.parametrize("guid", ["", "not-a-guid", "0" * 40, "\x00"])
def test_what_is_no_guid_changes_nothing(node, guid):
    start, _ = node
    panel = start()
    panel.called_by(guid)
    assert panel.guid() == ""
    panel.called_by(FIRST)
    panel.called_by(guid)
    assert panel.guid() == FIRST

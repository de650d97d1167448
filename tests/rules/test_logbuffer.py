"""The panel log ring, its level filter and handler setup in appliance.logbuffer."""

import logging
import re

import pytest

from appliance.errors import ServiceError
from appliance.runtime import logbuffer
from appliance.runtime.logbuffer import read_logs, setup_logging

LINE = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (DEBUG|INFO|WARNING|ERROR) - [\w.]+: .*$")

log = logging.getLogger("appliance.web")


@pytest.fixture(autouse=True)
def isolated_logging():
    """Restore the global logging state and empty the ring around every test."""
    root = logging.getLogger()
    panel = logging.getLogger("appliance")
    saved = (root.level, list(root.handlers), panel.level, panel.propagate)
    logbuffer._ring.clear()
    yield
    for handler in list(root.handlers):
        if handler not in saved[1]:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(saved[0])
    panel.setLevel(saved[2])
    panel.propagate = saved[3]
    logbuffer._ring.clear()


def ours():
    return [h for h in logging.getLogger().handlers if getattr(h, logbuffer._HANDLER_TAG, False)]


def log_every_level(logger=log):
    logger.debug("d-msg")
    logger.info("i-msg")
    logger.warning("w-msg")
    logger.error("e-msg")


def test_lines_have_the_documented_format():
    setup_logging(None)
    log.info("hello %s", "world")
    [line] = read_logs(10).splitlines()
    assert LINE.match(line)
    assert line.endswith(" INFO - appliance.web: hello world")


def test_level_filter_returns_lines_at_or_above_the_level():
    setup_logging(None, "debug")
    log_every_level()

    def messages(level):
        return [line.rsplit(": ", 1)[1] for line in read_logs(100, level).splitlines()]

    assert messages("debug") == ["d-msg", "i-msg", "w-msg", "e-msg"]
    assert messages("info") == ["i-msg", "w-msg", "e-msg"]
    assert messages("notice") == ["i-msg", "w-msg", "e-msg"]  # notice filters like info
    assert messages("warning") == ["w-msg", "e-msg"]
    assert messages("error") == ["e-msg"]
    assert messages("WARNING") == ["w-msg", "e-msg"]


def test_default_read_level_is_info():
    setup_logging(None, "debug")
    log_every_level()
    assert "d-msg" not in read_logs(100)
    assert "i-msg" in read_logs(100)


def test_count_returns_the_newest_lines_newest_last():
    setup_logging(None)
    for i in range(10):
        log.info("line %d", i)
    assert [line[-6:] for line in read_logs(3).split("\n")] == ["line 7", "line 8", "line 9"]
    assert read_logs("2").endswith("line 9")
    assert len(read_logs("2").split("\n")) == 2


def test_count_applies_after_the_level_filter():
    setup_logging(None)
    log.warning("old warning")
    for i in range(5):
        log.info("info %d", i)
    assert read_logs(1, "warning").endswith("old warning")


def test_read_logs_of_an_empty_ring_is_an_empty_string():
    assert read_logs(5) == ""


def test_setup_level_drops_panel_records_below_it():
    setup_logging(None, "warning")
    log_every_level()
    assert [line.rsplit(": ", 1)[1] for line in read_logs(100, "debug").splitlines()] == [
        "w-msg",
        "e-msg",
    ]


def test_other_libraries_only_log_warnings_and_above():
    setup_logging(None, "debug")
    log_every_level(logging.getLogger("urllib3.connectionpool"))
    lines = read_logs(100, "debug").splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "WARNING - urllib3.connectionpool: w-msg",
        "ERROR - urllib3.connectionpool: e-msg",
    ]


def test_setup_twice_does_not_duplicate_lines(tmp_path):
    setup_logging(str(tmp_path / "a.log"))
    setup_logging(str(tmp_path / "b.log"), "debug")
    assert len(ours()) == 3  # stderr, file, ring
    log.info("once")
    assert read_logs(100).count("once") == 1
    assert (tmp_path / "b.log").read_text().count("once") == 1
    assert "once" not in (tmp_path / "a.log").read_text()


def test_ring_survives_reconfiguration():
    setup_logging(None)
    log.info("before")
    setup_logging(None)
    log.info("after")
    assert [line.rsplit(": ", 1)[1] for line in read_logs(10).splitlines()] == [
        "before",
        "after",
    ]


def test_lines_go_to_stderr(capsys):
    setup_logging(None)
    log.error("to stderr")
    assert capsys.readouterr().err.strip().endswith("ERROR - appliance.web: to stderr")


def test_log_file_is_written_and_rotated_at_one_mebibyte(tmp_path):
    path = tmp_path / "logs" / "panel.log"  # missing directory is created
    setup_logging(str(path))
    log.info("first line")
    assert LINE.match(path.read_text().splitlines()[0])
    for _ in range(1100):
        log.info("x" * 1000)
    assert (tmp_path / "logs" / "panel.log.1").exists()
    assert path.stat().st_size <= 1 << 20
    for _ in range(4000):
        log.info("y" * 1000)
    assert (tmp_path / "logs" / "panel.log.3").exists()
    assert not (tmp_path / "logs" / "panel.log.4").exists()


def test_ring_keeps_the_last_5000_lines():
    setup_logging(None)
    for i in range(5010):
        log.info("n%d", i)
    lines = read_logs(10000).split("\n")
    assert len(lines) == 5000
    assert lines[0].endswith("n10")
    assert lines[-1].endswith("n5009")


@pytest.mark.parametrize("count", [0, "0", -1, 10001, "10001", "abc", "", "1.5", 2.0, True, None])
def test_invalid_count_is_rejected_with_the_range(count):
    with pytest.raises(ServiceError) as error:
        read_logs(count)
    assert error.value.msg == f"count must be an integer from 1 to 10000 (got {count!r})"


@pytest.mark.parametrize("count", [1, "1", 10000, "10000"])
def test_count_bounds_are_accepted(count):
    assert read_logs(count) == ""


@pytest.mark.parametrize("level", ["trace", "warn", "", "critical"])
def test_invalid_level_names_the_allowed_levels(level):
    with pytest.raises(ServiceError) as error:
        read_logs(10, level)
    assert error.value.msg == (
        f"level must be one of debug, info, notice, warning, error (got {level!r})"
    )


def test_setup_rejects_an_unknown_level():
    with pytest.raises(ServiceError, match="level must be one of debug, info"):
        setup_logging(None, "verbose")
    assert ours() == []

"""Server API over real HTTP: status, history, key generators, cert paths, the panel log."""

from __future__ import annotations

import base64
import time
import uuid

import psutil
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from helpers import certs_dir, write_self_signed

from appliance.services.admin.status import BUCKETS, METRICS, STEP_SECONDS

SERVER = "/panel/api/server"
STATUS_WAIT = 5


def is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_status_shape(status: dict) -> None:
    """The shape the spec gives for server/status, with values a real host can have."""
    assert is_number(status["cpu"]) and 0 <= status["cpu"] <= 100
    for key in ("mem", "swap", "disk"):
        pair = status[key]
        assert is_number(pair["current"]) and is_number(pair["total"]), key
        assert 0 <= pair["current"] <= pair["total"], key
    assert status["mem"]["total"] > 0 and status["disk"]["total"] > 0
    assert is_number(status["netIO"]["up"]) and status["netIO"]["up"] >= 0
    assert is_number(status["netIO"]["down"]) and status["netIO"]["down"] >= 0
    assert isinstance(status["core"]["state"], str) and status["core"]["state"]
    assert isinstance(status["core"]["version"], str)
    assert isinstance(status["tcpCount"], int) and status["tcpCount"] >= 1  # our own socket
    for key in ("load1", "load5", "load15"):
        assert is_number(status["load"][key]) and status["load"][key] >= 0
    assert isinstance(status["panelVersion"], str) and status["panelVersion"]


def test_status_has_the_spec_shape(api):
    reply = api.get(SERVER + "/status")
    assert reply["success"] is True
    check_status_shape(reply["obj"])


def test_status_is_refreshed(api):
    """Cached between samples, but a new sample arrives within a few seconds."""
    first = api.get(SERVER + "/status")["obj"]
    deadline = time.time() + STATUS_WAIT
    changed = False
    while time.time() < deadline and not changed:
        time.sleep(0.5)
        later = api.get(SERVER + "/status")["obj"]
        changed = later != first
    assert changed, "status did not change within a few seconds"


def test_status_is_fresh_while_no_browser_watches(api):
    """With no WebSocket open the panel samples only the charts' figures in the
    background; a status read still gets a snapshot at most STEP_SECONDS old."""
    api.get(SERVER + "/status")
    time.sleep(STEP_SECONDS * 1.5)
    status = api.get(SERVER + "/status")["obj"]
    check_status_shape(status)
    host_uptime = time.time() - psutil.boot_time()
    assert host_uptime - STEP_SECONDS - 1 <= status["uptime"] <= host_uptime + 1


def test_status_needs_sign_in(panel):
    response = panel.client(login=False).raw("GET", SERVER + "/status")
    assert response.status_code == 401
    assert response.json()["success"] is False
    assert "sign in" in response.json()["msg"]


def wait_for_samples(api, metric: str, bucket: int) -> list:
    deadline = time.time() + STATUS_WAIT
    while True:
        reply = api.get(f"{SERVER}/history/{metric}/{bucket}")
        assert reply["success"] is True, reply
        if reply["obj"] or time.time() > deadline:
            return reply["obj"]
        time.sleep(0.5)


@pytest.mark.parametrize("metric", METRICS)
def test_history_has_samples_for_every_metric(api, metric):
    samples = wait_for_samples(api, metric, 2)
    assert samples, f"no {metric} samples after a few seconds of running"
    now = time.time()
    for sample in samples:
        assert set(sample) == {"t", "v"}
        assert isinstance(sample["t"], int) and is_number(sample["v"])
        assert now - 6 * 3600 - 300 <= sample["t"] <= now + 2
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)


@pytest.mark.parametrize("bucket", BUCKETS)
def test_history_buckets_align(api, bucket):
    samples = wait_for_samples(api, "cpu", bucket)
    assert samples
    assert all(sample["t"] % bucket == 0 for sample in samples)
    assert all(0 <= sample["v"] <= 100 for sample in samples)


@pytest.mark.parametrize("bucket", BUCKETS)
def test_cpu_history_matches_history_cpu(api, bucket):
    wait_for_samples(api, "cpu", bucket)
    legacy = api.get(f"{SERVER}/cpuHistory/{bucket}")
    assert legacy["success"] is True
    assert legacy["obj"], "cpuHistory has no samples"
    assert all(sample["t"] % bucket == 0 for sample in legacy["obj"])


@pytest.mark.parametrize("bucket", ["7", "0", "-30", "abc", "30.5", "1e3", "3000"])
def test_history_rejects_unknown_buckets(api, bucket):
    for path in (f"/history/cpu/{bucket}", f"/cpuHistory/{bucket}"):
        reply = api.get(SERVER + path)
        assert reply["success"] is False, path
        assert "bucket must be one of 2, 30, 60, 120, 180, 300" in reply["msg"]


@pytest.mark.parametrize("metric", ["disk", "CPU", "xrAlloc", "cpu1"])
def test_history_rejects_unknown_metrics(api, metric):
    reply = api.get(f"{SERVER}/history/{metric}/30")
    assert reply["success"] is False
    assert "metric must be one of" in reply["msg"] and metric in reply["msg"]


def test_new_uuid_is_a_fresh_v4(api):
    values = {api.get(SERVER + "/getNewUUID")["obj"] for _ in range(5)}
    assert len(values) == 5
    for value in values:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and str(parsed) == value


def decode_raw_url(text: str) -> bytes:
    assert len(text) == 43 and "=" not in text and "+" not in text and "/" not in text
    return base64.urlsafe_b64decode(text + "=")


def test_new_x25519_pair_is_real(api):
    seen = set()
    for _ in range(3):
        reply = api.get(SERVER + "/getNewX25519Cert")
        assert reply["success"] is True
        private = decode_raw_url(reply["obj"]["privateKey"])
        public = decode_raw_url(reply["obj"]["publicKey"])
        derived = (
            X25519PrivateKey.from_private_bytes(private)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )
        assert derived == public
        # Clamped as `xray x25519` prints it.
        assert private[0] & 7 == 0 and private[31] & 128 == 0 and private[31] & 64
        seen.add(reply["obj"]["privateKey"])
    assert len(seen) == 3


def test_web_cert_files_follow_settings(fresh_panel):
    api = fresh_panel.client()
    reply = api.get(SERVER + "/getWebCertFiles")
    assert reply == {"success": True, "msg": "", "obj": {"webCertFile": "", "webKeyFile": ""}}
    cert_path, key_path = write_self_signed(certs_dir(fresh_panel), "panel.test")
    saved = api.post(
        "/panel/api/setting/update", json={"webCertFile": cert_path, "webKeyFile": key_path}
    )
    assert saved["success"] is True, saved
    reply = api.get(SERVER + "/getWebCertFiles")
    assert reply["obj"] == {"webCertFile": cert_path, "webKeyFile": key_path}


def post_logs(api, count, payload):
    return api.post(f"{SERVER}/logs/{count}", json=payload)


def test_logs_return_the_panel_log(panel, api):
    reply = post_logs(api, 100, {"level": "info", "syslog": False})
    assert reply["success"] is True
    lines = reply["obj"].splitlines()
    assert 0 < len(lines) <= 100
    assert any("panel listening on" in line for line in lines)
    assert any(" INFO " in line for line in lines)


def test_logs_count_limits_lines(api):
    reply = post_logs(api, 1, {"level": "info", "syslog": False})
    assert reply["success"] is True
    assert len(reply["obj"].splitlines()) == 1


def test_logs_level_error_excludes_info(api):
    reply = post_logs(api, 1000, {"level": "error", "syslog": False})
    assert reply["success"] is True
    assert " INFO " not in reply["obj"]
    assert "panel listening on" not in reply["obj"]
    warning = post_logs(api, 1000, {"level": "warning"})["obj"]
    assert " INFO " not in warning


@pytest.mark.parametrize("count", ["0", "-1", "abc", "10001", "1.5"])
def test_logs_reject_bad_counts(api, count):
    reply = post_logs(api, count, {"level": "info"})
    assert reply["success"] is False
    assert "count must be an integer from 1 to" in reply["msg"]


@pytest.mark.parametrize("level", ["bogus", 5, ["info"], True])
def test_logs_reject_bad_levels(api, level):
    reply = post_logs(api, 10, {"level": level})
    assert reply["success"] is False
    assert "level must be one of" in reply["msg"]


@pytest.mark.parametrize("syslog", ["yes", 2, {"a": 1}])
def test_logs_reject_bad_syslog(api, syslog):
    reply = post_logs(api, 10, {"level": "info", "syslog": syslog})
    assert reply["success"] is False
    assert "syslog must be true or false" in reply["msg"]


def test_logs_body_must_be_an_object(api):
    reply = post_logs(api, 10, ["info"])
    assert reply["success"] is False
    assert "JSON object" in reply["msg"]


def test_logs_are_post_only(api):
    response = api.raw("GET", SERVER + "/logs/10")
    assert response.status_code == 405
    assert "use POST" in response.json()["msg"]

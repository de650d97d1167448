"""A stand-in Xray for the tests of what only Xray serves (Xray cannot run here).

It answers `-version` as Xray does, accepts every config on `run -test -c FILE`, and on
`run -c FILE` serves, on the API port the config names, the StatsService and
HandlerService methods the panel calls, under Xray's `xray.` package prefix:

- QueryStats: the counters under `"counters"` (`{name: value}`) in the JSON file named by
  `FAKE_XRAY_STATE`, none without it, less their values when this process started: a
  restarted core counts from zero, as a real one does. With `"holdStats": true` the
  answer waits (at most HOLD_SECONDS, inside the panel's call timeout) until the file no
  longer says so: a test acts while the panel is provably in the middle of reading them;
- AlterInbound: accepted (live user changes);
- GetAllOnlineUsers and GetStatsOnlineIpList: from the JSON file named by
  `FAKE_XRAY_STATE`, read at every call, `{"online": {EMAIL: {IP: unix seconds}}}`; a user
  not in it is "not found", as in Xray. Users in its `"dropped"` list are listed online
  but not found when asked (they went offline between the two calls). With
  `"unimplemented": true` both methods are unknown, as in an Xray release before them.

Each call is appended to the file named by `FAKE_XRAY_CALLS` as a JSON line
`{"method": path, "request": hex of the request bytes}`, for the test to check field by
field; a call of an unknown method is written with `"request": null` (gRPC refuses it
before the request is read). Run it with the test's Python:
`python fake_xray.py run -c config.json`.

The few protobuf bytes it reads and writes are coded here rather than with the panel's
`appliance.core.api.wire`, so the panel's codec is checked against a second, independent one.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

VERSION = "Xray 25.10.15 (Xray, Penetrates Everything.) Custom (go1.25.1 linux/amd64)"
STATS = "/xray.app.stats.command.StatsService/"
HANDLER = "/xray.app.proxyman.command.HandlerService/"
ONLINE_METHODS = (STATS + "GetAllOnlineUsers", STATS + "GetStatsOnlineIpList")
HOLD_SECONDS = 4.0


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    return varint(number << 3 | wire_type) + payload


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def text(number: int, value: str) -> bytes:
    data = value.encode()
    return field(number, 2, varint(len(data)) + data)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def request_name(request: bytes) -> str:
    """Field 1 (`name`) of a GetStatsRequest that starts with it, as proto3 encoders write."""
    if not request or request[0] != 0x0A:
        return ""
    size, pos = read_varint(request, 1)
    return request[pos : pos + size].decode()


class FakeXray:
    def __init__(self, state_path: str, calls_path: str):
        self.state_path = state_path
        self.calls_path = calls_path
        self.lock = threading.Lock()
        self.baseline = self.state().get("counters", {})

    def state(self) -> dict:
        try:
            with open(self.state_path) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {}

    def record(self, method: str, request: bytes | None) -> None:
        entry = {"method": method, "request": None if request is None else request.hex()}
        with self.lock, open(self.calls_path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def service(self, details):
        method = details.method
        if method in ONLINE_METHODS and self.state().get("unimplemented"):
            self.record(method, None)
            return None
        answers = {
            STATS + "QueryStats": self.query_stats,
            STATS + "GetAllOnlineUsers": self.online_users,
            STATS + "GetStatsOnlineIpList": self.online_ips,
            HANDLER + "AlterInbound": lambda request, context: b"",
        }
        if method not in answers:
            return None

        def answer(request: bytes, context) -> bytes:
            self.record(method, request)
            return answers[method](request, context)

        return grpc.unary_unary_rpc_method_handler(answer)

    def query_stats(self, request: bytes, context) -> bytes:
        deadline = time.monotonic() + HOLD_SECONDS
        while self.state().get("holdStats") and time.monotonic() < deadline:
            time.sleep(0.02)
        counters = {
            name: value - self.baseline.get(name, 0)
            for name, value in self.state().get("counters", {}).items()
        }
        return b"".join(
            field(1, 2, varint(len(stat)) + stat)
            for stat in (
                text(1, name) + field(2, 0, varint(max(value, 0)))
                for name, value in counters.items()
            )
        )

    def online_users(self, request: bytes, context) -> bytes:
        state = self.state()
        online = [*state.get("online", {}), *state.get("dropped", [])]
        return b"".join(text(1, f"user>>>{email}>>>online") for email in online)

    def online_ips(self, request: bytes, context) -> bytes:
        name = request_name(request)
        email = name.removeprefix("user>>>").removesuffix(">>>online")
        ips = self.state().get("online", {}).get(email)
        if ips is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"app/stats/command: {name} not found.")
        entries = b"".join(
            field(2, 2, varint(len(entry)) + entry)
            for entry in (text(1, ip) + field(2, 0, varint(seen)) for ip, seen in ips.items())
        )
        return text(1, name) + entries


def api_port(config_path: str) -> int:
    with open(config_path) as fh:
        config = json.load(fh)
    return next(inbound["port"] for inbound in config["inbounds"] if inbound.get("tag") == "api")


def main(args: list[str]) -> int:
    if args == ["-version"] or args == ["version"]:
        print(VERSION)
        print("A unified platform for anti-censorship.")
        return 0
    if args[:1] != ["run"] or "-c" not in args:
        print(f"fake xray: unknown arguments {args}", file=sys.stderr)
        return 23
    config_path = args[args.index("-c") + 1]
    port = api_port(config_path)
    if "-test" in args:
        print("Configuration OK.")
        return 0
    fake = FakeXray(os.environ["FAKE_XRAY_STATE"], os.environ["FAKE_XRAY_CALLS"])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers([fake])
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print(f"{VERSION} started", flush=True)
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The core as a child process: find it, test configs with it, run it, keep it running.

`CoreProcess` owns one core process at a time. A new config is written beside the live
one and checked with the core's own test mode first; only a config the core accepts
replaces `config.json` and the running process, so a refused config leaves the running
core alone and its reason reaches the caller as a `ServiceError`. A core that exits on its
own is restarted after 1 s, 2 s, 4 s ... up to 30 s, the delay starting over once a run
lasted a minute; every state change is reported through `on_state`, and `before_respawn`
runs just before such a restart, so the owner can bring config.json up to date first
(it may lag behind the changes the core took live, see `record`).

Children get the panel's environment minus `LD_LIBRARY_PATH` (a frozen panel points it at
its own unpack folder, where the core finds the wrong libraries) and the frozen panel's
`_PYI_` markers, and their own process
group, so stopping the core also stops anything it started. The code uses `subprocess`
and `threading` by module attribute: in the panel process gevent's monkey patching makes
both cooperative (the watcher becomes a greenlet), while tests run them as plain threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from appliance.core import capabilities
from appliance.core.api import core_words
from appliance.errors import ServiceError
from appliance.runtime.environment import child_environment

log = logging.getLogger(__name__)

RUNNING, STOPPED, ERROR, NOT_INSTALLED = "running", "stop", "error", "not installed"
CONFIG_NAME = "config.json"
CANDIDATES = ("xray", "v2ray")
DETECT_TIMEOUT = 10
TEST_TIMEOUT = 30
STOP_GRACE = 5
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
STABLE_SECONDS = 60.0
OUTPUT_LINES = 500
PIECE_CLIENTS = 5000  # client entries encoded between two pauses
MESSAGE_LIMIT = 500
REASON_LINES = 20

VERSION_LINE = re.compile(r"^(Xray|V2Ray) v?(\d+\.\d+\.\d+\S*)", re.MULTILINE)
LOG_LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d")
BANNER_LINES = ("A unified platform for anti-censorship.", "Penetrates Everything.")
LEADING_NOISE = ("panic: ", "Failed to start: ", "Failed to start ", "main: ")


class CoreFlavor(NamedTuple):
    flavor: str  # "xray" or "v2fly"
    version: str  # e.g. "1.8.24" or "4.34.0"
    prefix: str  # package prefix of the gRPC API: "xray" or "v2ray.core"


class CoreMissing(ServiceError):
    """No core binary where one was expected."""


def version_output(binary: str) -> str:
    """What `binary -version` prints (both cores answer that flag); raises OSError when it
    cannot run and subprocess.TimeoutExpired when it does not answer in time."""
    result = subprocess.run(
        [binary, "-version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=DETECT_TIMEOUT,
        env=child_environment(),
    )
    return result.stdout.decode(errors="replace")


def _ignore_state(state: str) -> None:
    """The default `on_state`: nobody listens."""


def _no_pause() -> None:
    """The default `pause`: write straight through."""


def _nothing_to_prepare() -> None:
    """The default `before_respawn`: config.json is always current."""


class CoreProcess:
    def __init__(
        self,
        binary: str | None,
        workdir: str,
        on_state: Callable[[str], None] = _ignore_state,
        pause: Callable[[], None] = _no_pause,
    ):
        """`binary` is an explicit path or command name (None: xray, else v2ray, on PATH);
        `workdir` holds config.json; `on_state` gets every new state and must not block;
        `pause` runs between the pieces of a config written out (see `config_pieces`)."""
        self.binary = binary
        self.workdir = workdir
        self.on_state = on_state
        self.pause = pause
        self.before_respawn: Callable[[], None] = _nothing_to_prepare
        self.state = STOPPED
        self.error = ""
        self.restarts = 0
        self.info: CoreFlavor | None = None
        self._path = ""
        self._lines: deque[str] = deque(maxlen=OUTPUT_LINES)
        self._printed = 0
        self._run_mark = 0
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._started_at = 0.0
        self._backoff = 0.0
        self._generation = 0
        self._wake = threading.Event()

    @property
    def version(self) -> str:
        return self.info.version if self.info else ""

    def running_for(self) -> float:
        """Seconds since the running core was started; 0 when none runs."""
        if self.state != RUNNING or self._proc is None:
            return 0.0
        return time.monotonic() - self._started_at

    def check_features(self, features: Iterable[str]) -> None:
        """Raise `ServiceError` naming the core and the feature when the detected core
        does not run all of `features`; without a core, nothing is refused. Asked of the
        process, not of the service around it, so the services that ask (client saves)
        need nothing built after them."""
        reason = capabilities.check(features, self.info)
        if reason:
            raise ServiceError(reason)

    @property
    def pid(self) -> int:
        """The running core's process id; 0 when none runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else 0

    def unavailable(self, reason: str) -> None:
        """Record that no usable core binary exists (found out by `detect`)."""
        with self._lock:
            self._set_state(NOT_INSTALLED, reason)

    @property
    def config_path(self) -> str:
        return os.path.join(self.workdir, CONFIG_NAME)

    def output(self, count: int) -> list[str]:
        """The last `count` lines the core printed (stdout and stderr, in order)."""
        return list(self._lines)[-count:] if count > 0 else []

    # ---- finding the binary ---------------------------------------------------------------

    def detect(self) -> CoreFlavor:
        """Find the core and ask its version; raises `CoreMissing` when there is none and
        `ServiceError` when the binary is not a core this panel can drive."""
        path = self._find()
        try:
            text = version_output(path)
        except subprocess.TimeoutExpired:
            raise ServiceError(
                f"{path} -version did not answer within {DETECT_TIMEOUT} s"
            ) from None
        except OSError as exc:
            raise CoreMissing(f"the core is not installed: {path}: {exc.strerror}") from None
        match = VERSION_LINE.search(text)
        if match is None:
            first = text.strip().splitlines()[:1] or ["nothing"]
            raise ServiceError(
                f"{path} is neither Xray nor V2Ray: its -version printed {first[0]!r}"
            )
        name, version = match.groups()
        if name == "Xray":
            self.info = CoreFlavor("xray", version, "xray")
        else:
            self.info = CoreFlavor("v2fly", version, "v2ray.core")
        self._path = path
        return self.info

    def _find(self) -> str:
        if self.binary:
            path = shutil.which(self.binary)
            if path is None:
                raise CoreMissing(
                    f"the core is not installed: {self.binary} is missing or not executable"
                )
            return path
        for name in CANDIDATES:
            path = shutil.which(name)
            if path:
                return path
        raise CoreMissing(
            "the core is not installed: neither xray nor v2ray is on PATH; "
            "install one or configure the path of the core binary"
        )

    def _detected(self) -> CoreFlavor:
        if self.info is None or not os.path.exists(self._path):
            self.info = None
            return self.detect()
        return self.info

    def _command(self, config_path: str, test: bool = False) -> list[str]:
        if self._detected().flavor == "xray":
            return [self._path, "run", *(["-test"] if test else []), "-c", config_path]
        return [self._path, *(["-test"] if test else []), "-config", config_path]

    # ---- testing configs ------------------------------------------------------------------

    def test(self, config: dict) -> None:
        """Raise `ServiceError` with the core's reason when it refuses `config`."""
        path = self._write_candidate(config)
        try:
            self._test_file(path)
        finally:
            os.unlink(path)

    def _write_candidate(self, config: dict) -> str:
        """`config` in a new file beside config.json, readable by the owner only; a failed
        write removes the file and raises `ServiceError` with the system's reason."""
        os.makedirs(self.workdir, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="config.", suffix=".json", dir=self.workdir)
        try:
            with os.fdopen(fd, "w") as file:
                for piece in config_pieces(config):
                    file.write(piece)
                    self.pause()
                file.flush()
                os.fsync(file.fileno())
        except BaseException as exc:
            # A full disk (or a file size limit) must not leave a partial file behind.
            os.unlink(path)
            if isinstance(exc, OSError):
                raise ServiceError(
                    f"the core's config could not be written in {self.workdir}: "
                    f"{exc.strerror or exc}; config.json was left as it was"
                ) from None
            raise
        return path

    def _test_file(self, path: str) -> None:
        command = self._command(path, test=True)
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                timeout=TEST_TIMEOUT,
                env=child_environment(),
            )
        except subprocess.TimeoutExpired:
            raise ServiceError(
                f"the core did not finish testing the config within {TEST_TIMEOUT} s"
            ) from None
        except OSError as exc:
            self.info = None
            raise CoreMissing(f"the core is not installed: {self._path}: {exc.strerror}") from None
        if result.returncode != 0:
            text = result.stdout.decode(errors="replace").replace(path, CONFIG_NAME)
            reason = _core_reason(text) or f"its test exited with code {result.returncode}"
            raise ServiceError(f"the core refused the config: {reason}")

    # ---- running ---------------------------------------------------------------------

    def start(self, config: dict) -> None:
        """Run the core on `config`; a core that already runs is restarted on it."""
        self.restart(config)

    def restart(self, config: dict) -> None:
        """Test `config`, make it config.json and (re)start the core on it. A refused
        config raises `ServiceError` and changes nothing; a missing core sets the state
        "not installed" instead of raising."""
        with self._lock:
            try:
                self._install(config)
            except CoreMissing as exc:
                self._cancel_and_stop()
                self._set_state(NOT_INSTALLED, exc.msg)
                return
            self._cancel_and_stop()
            self._backoff = 0.0
            self._spawn()

    def _install(self, config: dict) -> None:
        """Make `config` the config.json, if the core accepts it."""
        self._detected()
        candidate = self._write_candidate(config)
        try:
            self._test_file(candidate)
        except BaseException:
            os.unlink(candidate)
            raise
        os.replace(candidate, self.config_path)

    def record(self, config: dict) -> None:
        """Make `config` the config.json of a core that took it live (its client
        entries, not a restart), so the supervisor restarts a crashed core on it. Not
        tested again: it differs from the tested config only in client entries. The
        owner may let it lag behind the users the core took, as long as it catches up
        in `before_respawn` and before anyone else reads the file."""
        with self._lock:
            os.replace(self._write_candidate(config), self.config_path)

    def stop(self) -> None:
        """Stop the core (SIGTERM, SIGKILL after a grace period) and any pending restart.
        Stopping a core that does not run does nothing."""
        with self._lock:
            self._cancel_and_stop()
            self._backoff = 0.0
            if self.state != NOT_INSTALLED:
                self._set_state(STOPPED, "")

    def _cancel_and_stop(self) -> None:
        """Called with the lock held: forget any scheduled restart, end the process."""
        self._generation += 1
        self._wake.set()
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc)

    def _spawn(self) -> None:
        """Called with the lock held: start the core on config.json and watch it."""
        try:
            proc = subprocess.Popen(
                self._command(self.config_path),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=child_environment(),
                start_new_session=True,
            )
        except ServiceError as exc:
            self._set_state(NOT_INSTALLED if isinstance(exc, CoreMissing) else ERROR, exc.msg)
            return
        except OSError as exc:
            self._set_state(ERROR, f"cannot start the core {self._path}: {exc.strerror or exc}")
            return
        self._proc = proc
        self.restarts += 1
        self._run_mark = self._printed
        self._started_at = time.monotonic()
        threading.Thread(target=self._watch, args=(proc,), name="core-watch", daemon=True).start()
        self._set_state(RUNNING, "")

    def _watch(self, proc: subprocess.Popen) -> None:
        """Collect the output of `proc` until it exits; if nobody stopped it, it crashed:
        report and schedule the next start."""
        for raw in proc.stdout:
            self._lines.append(raw.decode(errors="replace").rstrip())
            self._printed += 1
        code = proc.wait()
        with self._lock:
            if proc is not self._proc:
                return
            self._proc = None
            if time.monotonic() - self._started_at >= STABLE_SECONDS:
                self._backoff = 0.0
            self._backoff = min(self._backoff * 2, BACKOFF_MAX) if self._backoff else BACKOFF_FIRST
            delay, generation = self._backoff, self._generation
            wake = self._wake = threading.Event()
            last_run = min(self._printed - self._run_mark, REASON_LINES)
            reason = _core_reason("\n".join(self.output(last_run)))
            self._set_state(
                ERROR,
                f"the core exited unexpectedly ({_exit_description(code)})"
                + (f": {reason}" if reason else "")
                + f"; restarting in {delay:g} s",
            )
        if wake.wait(delay):
            return
        try:
            self.before_respawn()
        except Exception:
            log.exception("preparing the restart of the core failed; it starts as it was")
        with self._lock:
            if generation == self._generation:
                self._spawn()

    def _set_state(self, state: str, error: str) -> None:
        changed = state != self.state
        self.state, self.error = state, error
        if error:
            log.warning("%s", error)
        if changed:
            try:
                self.on_state(state)
            except Exception:
                log.exception("the core state listener failed on %r", state)


def config_pieces(config: dict) -> Iterator[str]:
    """The JSON text of `config`, the client list of each inbound a slice at a time.
    Every change rewrites config.json, and one encoding of 100,000 client entries is
    0.15 s in which the caller's `pause` could not run. Without indentation: only the C
    encoder is fast enough (the indenting one took 0.55 s)."""
    yield "{"
    for index, (key, value) in enumerate(config.items()):
        yield f"{', ' if index else ''}{json.dumps(key)}: "
        if key != "inbounds" or not isinstance(value, list):
            yield json.dumps(value)
            continue
        yield "["
        for position, inbound in enumerate(value):
            if position:
                yield ", "
            yield from _inbound_pieces(inbound)
        yield "]"
    yield "}"


def _inbound_pieces(inbound) -> Iterator[str]:
    settings = inbound.get("settings") if isinstance(inbound, dict) else None
    clients = settings.get("clients") if isinstance(settings, dict) else None
    if not isinstance(clients, list) or len(clients) <= PIECE_CLIENTS:
        yield json.dumps(inbound)
        return
    # The inbound's text with a one-off string where its client list goes, cut there.
    mark = json.dumps(f"clients-{secrets.token_hex(16)}")
    text = json.dumps({**inbound, "settings": {**settings, "clients": json.loads(mark)}})
    before, after = text.split(mark, 1)
    yield before + "["
    for start in range(0, len(clients), PIECE_CLIENTS):
        text = json.dumps(clients[start : start + PIECE_CLIENTS])[1:-1]
        yield f"{', ' if start else ''}{text}"
    yield "]" + after


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM to the core's process group, SIGKILL if it is still there after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _exit_description(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _core_reason(output: str) -> str:
    """The sentence that says why the core stopped, out of everything it printed: the
    panic message if it panicked, else its last line that is neither banner nor log
    ("" when there is none, as after a kill)."""
    lines = []
    for line in (raw.strip() for raw in output.splitlines()):
        if line.startswith("goroutine "):
            break
        if line and line not in BANNER_LINES and not VERSION_LINE.match(line):
            lines.append(line)
    plain = [line for line in lines if not LOG_LINE.match(line)]
    panics = [line for line in plain if line.startswith("panic: ")]
    chosen = panics[0] if panics else (plain or [""])[-1]
    for noise in LEADING_NOISE:
        chosen = chosen.removeprefix(noise)
    reason = core_words(chosen)
    return reason if len(reason) <= MESSAGE_LIMIT else reason[: MESSAGE_LIMIT - 3] + "..."

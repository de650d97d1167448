"""The ceiling: a one-route Bottle app served exactly the way the panel serves its own.

Same monkey-patching, same listening socket (`listen()`, TCP_NODELAY), same gevent
WSGIServer, handler class and time limits (`make_server()`), same `BasePath` wrapper;
only the panel's plugin, store and services are missing. What the panel's figures cost
above this one is the panel's own work. Run by the bench as a child process; prints the
port it bound.

`--processes N` serves the one socket from N processes, as the subscription workers do
(the first process and N - 1 started again with the socket's descriptor): the ceiling
for the workers' figures. SIGTERM to the first stops them all.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import bottle  # noqa: E402
import gevent  # noqa: E402
from gevent.fileobject import FileObject  # noqa: E402

from appliance.config import BODY_TIMEOUT_SECONDS, HEADER_TIMEOUT_SECONDS  # noqa: E402
from appliance.web.connections import ConnectionLimits  # noqa: E402
from appliance.web.server import BasePath, listen, make_server  # noqa: E402

# The panel's port as it runs by default: its time limits, and no cap per address.
LIMITS = ConnectionLimits(HEADER_TIMEOUT_SECONDS, BODY_TIMEOUT_SECONDS)


def hello_app() -> bottle.Bottle:
    app = bottle.Bottle()

    @app.get("/hello")
    def hello():
        return {"success": True, "msg": "", "obj": "hello"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--fd", type=int, help="serve this inherited listening socket")
    args = parser.parse_args()
    sock = socket.socket(fileno=args.fd) if args.fd is not None else listen("127.0.0.1", 0)
    server = make_server(
        sock, BasePath(hello_app(), "/"), LIMITS, upgrade_allowed=lambda environ: False
    )
    if args.processes > 1 or args.fd is not None:
        server.max_accept = 1  # as a subscription worker takes connections (sub_worker.py)
    others = [
        subprocess.Popen(
            [sys.executable, __file__, "--fd", str(sock.fileno())],
            stdin=subprocess.PIPE,
            pass_fds=(sock.fileno(),),
        )
        for _ in range(args.processes - 1)
    ]
    if args.fd is not None:
        # Started by the first process: stop when its pipe closes, however it ended.
        gevent.spawn(lambda: (FileObject(0, "rb", close=False).read(), server.stop()))
    else:
        print(f"hello listening on http://127.0.0.1:{sock.getsockname()[1]}/", flush=True)
    gevent.signal_handler(signal.SIGTERM, server.stop)
    server.serve_forever()
    for other in others:
        other.terminate()
        other.wait()


if __name__ == "__main__":
    main()

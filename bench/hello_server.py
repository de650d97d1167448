"""The ceiling: a one-route Bottle app served exactly the way the panel serves its own.

Same monkey-patching, same listening socket (`listen()`, TCP_NODELAY), same gevent
WSGIServer and handler class (`make_server()`), same `BasePath` wrapper; only the panel's
plugin, store and services are missing. What the panel's figures cost above this one is
the panel's own work. Run by the bench as a child process; prints the port it bound.
"""

from gevent import monkey

monkey.patch_all()

import bottle  # noqa: E402

from appliance.web.server import BasePath, listen, make_server  # noqa: E402


def hello_app() -> bottle.Bottle:
    app = bottle.Bottle()

    @app.get("/hello")
    def hello():
        return {"success": True, "msg": "", "obj": "hello"}

    return app


def main() -> None:
    sock = listen("127.0.0.1", 0)
    server = make_server(sock, BasePath(hello_app(), "/"), upgrade_allowed=lambda environ: False)
    print(f"hello listening on http://127.0.0.1:{sock.getsockname()[1]}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

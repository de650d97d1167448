"""`python -m appliance` is the same as the `appliance` command.

`sub-worker` is the one subcommand that skips the command line's set-up: it is how the
panel starts a subscription worker (appliance.sub_worker), which needs neither gRPC nor
anything else the panel loads, so each worker stays small. `mtproto-proxy` is the same
for the MTProto proxy the panel runs beside the core (appliance.mtproto.proxy).
"""

import sys

if sys.argv[1:2] == ["sub-worker"]:
    from appliance.sub_worker import main
elif sys.argv[1:2] == ["mtproto-proxy"]:
    from appliance.mtproto.proxy import main as proxy_main

    sys.exit(proxy_main(sys.argv[2:]))
else:
    from appliance.cli import main

sys.exit(main())

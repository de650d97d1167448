"""`python -m appliance` is the same as the `appliance` command.

`sub-worker` is the one subcommand that skips the command line's set-up: it is how the
panel starts a subscription worker (appliance.sub_worker), which needs neither gRPC nor
anything else the panel loads, so each worker stays small.
"""

import sys

if sys.argv[1:2] == ["sub-worker"]:
    from appliance.sub_worker import main
else:
    from appliance.cli import main

sys.exit(main())

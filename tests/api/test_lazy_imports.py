"""Libraries an idle panel does not need stay unimported until first used.

Each library imported at start stays resident for the life of the process: `requests`
(with urllib3, charset_normalizer, idna and certifi) is megabytes that only the core
metrics fetch uses, segno's QR tables serve only the subscription page a browser opens,
and zxcvbn's password lists (about 12 MiB) judge only a password being set. They are
imported where they are used; this keeps a module-level import from bringing them back
unnoticed. grpcio (its C core and the C++ runtime, about 12 MiB) is a test dependency
only: the panel calls the core's API through `h2`, pure Python, which stays imported
because a panel with a core calls it at idle (the traffic tick). protobuf, too, is for the
tests alone (they hold the panel's own wire code to it): the panel never imports it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import clean_env

LAZY = (
    "requests",
    "urllib3",
    "charset_normalizer",
    "segno",
    "grpc",
    "zxcvbn",
    "google.protobuf",
)


def test_the_panel_starts_without_the_libraries_only_some_requests_need():
    code = (
        "import json, sys\n"
        "import appliance.cli\n"
        "from appliance.app import Panel\n"
        f"print(json.dumps([name for name in {LAZY!r} if name in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []

"""The proxy core: its config template, and (with the supervisor) the process itself."""

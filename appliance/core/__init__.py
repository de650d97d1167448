"""The proxy core: its config builder and template, the process itself, what each kind of
core can run, and the client of its gRPC API (`core.api`)."""

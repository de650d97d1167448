"""Control of the core: the supervisor that keeps it in step with the database, its
logs, metrics, probes, releases and routing.
"""

"""What the running process needs beside its business: background jobs, memory, the
log buffer, the environment of child processes and the guards on files and fetches.
"""

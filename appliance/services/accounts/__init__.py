"""Who may use the panel: sign-in, sessions, second factor, passwords and API tokens."""

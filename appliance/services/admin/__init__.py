"""Running the panel itself: settings, backups, host status, updates and the chat bot."""

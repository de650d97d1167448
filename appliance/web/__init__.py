"""The panel's HTTP side: Bottle routes per resource, the API plugin (auth, CSRF,
envelope, invalidation), the WebSocket hub and the servers that listen."""

"""The subscription server: what client apps poll, on its own port."""

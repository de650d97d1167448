"""Inbounds: their records, fallbacks, hosts and the ports they listen on."""

"""Outbounds that come from outside the template: subscriptions of a provider's servers,
the WARP tunnel and the VPN provider, each merged into the core config beside the
template's own outbounds.
"""

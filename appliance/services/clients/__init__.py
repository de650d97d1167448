"""Clients: their records, bulk changes, paged queries, traffic, IPs, groups, who is
online and the subscriptions they are served.
"""

"""Nodes: the remote panels this panel manages, how they are reached and trusted, their
health, what is deployed to them and the traffic they count.
"""

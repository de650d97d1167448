"""Generators and checkers the forms call: keys, certificate hashes, mail settings."""

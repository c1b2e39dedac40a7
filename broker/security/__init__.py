"""The broker's security policy, shared by both protocols (authorization: authorizer.py)."""

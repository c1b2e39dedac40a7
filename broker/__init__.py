"""The Strata broker: its life cycle (app.py) and object graph (compose.py); the folders
by job are listed in broker/SERVER.md ("Where things are")."""

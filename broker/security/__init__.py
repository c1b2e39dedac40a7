"""The broker's security policy, shared by both protocols.

- authorizer.py: ACLs (authorization).

- scram.py: SCRAM-SHA-256/512 (RFC 5802/7677): credentials and the server side of
  the exchange.
- plain.py: SASL PLAIN (RFC 4616).
- jaas.py: Kafka's JAAS configuration line (`sasl.jaas.config`).
- credentials.py: the SCRAM credential store in the data directory.
- sasl.py: per-listener SASL settings and the per-connection exchange that the
  Kafka listener's SaslHandshake/SaslAuthenticate and the native
  SASL_AUTHENTICATE both drive.
- principal.py: principals (`User:alice`, `User:CN=...`) and Kafka's
  ssl.principal.mapping.rules.
"""

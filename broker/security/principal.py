"""Principals as Kafka names them, and Kafka's `ssl.principal.mapping.rules`.

- `ANONYMOUS` is "User:ANONYMOUS", the principal of a connection that has not
  authenticated (PLAINTEXT, SSL without a client certificate).
- `user_principal(name)` is "User:<name>" (a SASL user).
- `SslPrincipalMapper(rules)` reads the rules as Kafka's SslPrincipalMapper:
  a comma list of `DEFAULT` and `RULE:<pattern>/<replacement>/[LU]`; the first
  rule whose pattern matches the whole certificate subject (RFC 2253/4514 form,
  "CN=alice,OU=eng,O=example") gives the name (`$1` refers to a group; L lower-
  cases, U upper-cases); DEFAULT gives the subject unchanged (Kafka's default rules
  are just DEFAULT). `name(subject)` applies them; no rule matching raises
  NoMatchingRule, and the connection fails authentication, as Kafka's
  DefaultKafkaPrincipalBuilder. ValueError when the rules do not parse.
"""

from __future__ import annotations

import re

ANONYMOUS = "User:ANONYMOUS"

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules rule maps the certificate's subject."""


def user_principal(name: str) -> str:
    return f"User:{name}"


class SslPrincipalMapper:
    def __init__(self, rules: str = "DEFAULT"):
        self.rules: list[tuple[re.Pattern, str, str] | None] = []  # None = DEFAULT
        text = rules.strip() or "DEFAULT"
        self.text = text
        at = 0
        while at < len(text):
            match = _RULE.match(text, at)
            if match is None or match.end() == at:
                raise ValueError(f"invalid rule at {text[at:at + 40]!r}: expected DEFAULT or "
                                 "RULE:pattern/replacement/[LU]")
            if match.group(1):
                self.rules.append(None)
            else:
                try:
                    pattern = re.compile(match.group(2))
                except re.error as e:
                    raise ValueError(f"invalid pattern {match.group(2)!r}: {e}") from None
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
                self.rules.append((pattern, replacement, match.group(4)))
            at = match.end()

    def name(self, subject: str) -> str:
        for rule in self.rules:
            if rule is None:
                return subject
            pattern, replacement, case = rule
            if pattern.fullmatch(subject):
                name = pattern.sub(replacement, subject)  # Java's replaceAll, as Kafka's Rule.apply
                return name.lower() if case == "L" else name.upper() if case == "U" else name
        raise NoMatchingRule(f"No rules apply to {subject}, rules {self.text}")


def rules_complaint(value: str) -> str | None:
    """Key check of ssl.principal.mapping.rules."""
    try:
        SslPrincipalMapper(value)
    except ValueError as e:
        return str(e)
    return None

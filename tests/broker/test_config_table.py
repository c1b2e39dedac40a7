"""The README's broker configuration table is the one generated from the key tables."""

from broker.config.keys import ALL_KEYS
from broker.config.readme_table import README, markdown, replace_table


def test_readme_table_is_generated_from_the_key_table():
    text = README.read_text(encoding="utf-8")
    assert replace_table(text) == text, (
        "README's config table is stale: run python -m broker.config.readme_table --write")


def test_table_lists_every_key_the_broker_reads():
    table = markdown()
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert rows == set(ALL_KEYS)

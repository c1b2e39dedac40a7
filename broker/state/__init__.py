"""The broker's own state on disk: the topic registry, committed group offsets, the internal
topics and their record fields, and the JSON state files."""

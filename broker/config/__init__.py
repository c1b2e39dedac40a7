"""Broker configuration: the keys (keys.py), loading them from file, environment and command line
(broker_config.py), Kafka's full key tables for DescribeConfigs (kafka_keys.py), dynamic broker
and per-group configs."""

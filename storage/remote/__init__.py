"""Tiered storage (KIP-405): rolled segments of a topic with remote.storage.enable
copied to an object store, their metadata kept in Kafka's __remote_log_metadata
record layout, and reads below the local log start served from the store.

- config.py: the broker's remote.log.* and rsm.config.* settings (the topic's
  settings are in storage/config.py);
- store.py: the RemoteStorageManager over obstore (file and S3 stores);
- metadata.py: the remote log metadata records and their durable store;
- copier.py: the RemoteLogManager's copy, local-retention and remote-retention
  passes for one partition log;
- reader.py: reads of records at an offset from remote segments.
"""

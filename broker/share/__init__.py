"""Share groups (KIP-932, as Apache Kafka 4.2 serves them): the machinery the
Kafka API handlers of ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
ShareAcknowledge and the share-group offsets APIs stand on.

    errors.py      Kafka's error codes of share groups; ShareError
    config.py      group configs share.* over the broker defaults group.share.*
    log_view.py    what a share partition needs of the log (the core provides it);
                   StorageShareLog, that view of a storage.log.Log
    partition.py   SharePartition: SPSO/SPEO, in-flight record states, acquisition
                   locks, acknowledgement, delivery counts
    state_records.py  `__share_group_state` ShareSnapshot/ShareUpdate keys and values
    state_store.py    the share coordinator: Initialize/Read/Write/DeleteShareGroupState
                      over the state topic's logs, snapshots every N updates, rebuilt at start
    assignor.py    the share-group SimpleAssignor (partitions shared by several members)
    group.py       ShareGroup: ShareGroupHeartbeat membership, epochs, session timeouts
    session.py     the share session cache of ShareFetch / ShareAcknowledge (epochs)
    manager.py     SharePartitionManager: share partitions loaded from and written to
                   the state store (what the ShareFetch/ShareAcknowledge and offsets
                   handlers call)
"""

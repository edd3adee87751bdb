"""The broker's cluster layer: between the request handlers and storage/replication.

- partition.py: `Partition`, one partition as a request sees it -- its log (storage's
  PartitionLog) bound to its replication group's rules (leader, lease, high watermark, acks);
  partition_table.py: `PartitionTable.get(topic, p)`, the one lookup of a partition;
- replica_manager.py: a replication group's leader side (roles, appends and their journal
  entries, acks, topic create and delete, DeleteRecords);
- replication_groups.py: the broker's replication groups, and which one replicates what;
  topic_admin.py: topics created, deleted and listed across them;
- committed_offsets.py: consumer offsets, stored in the `__offsets` topic;
- retention.py: the thread that trims partitions by size and age (and compacts `__offsets`).
"""

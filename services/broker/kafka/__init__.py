"""Kafka's wire protocol on every broker, over Kaska's own log (docs/kafka.md).

One log, two protocols: a Kafka request finds its partition (../cluster/partition.py) as a
Kaska request does, and goes through the same storage, replica manager (leadership, high
watermark, acks, journal) and producer table; only the edge differs. Modules, one concept
each:

- listener.py, connection.py: accepting (../network/acceptor.py) and serving connections
  (in-order answers);
- framing.py, requests.py, dispatch.py: frames, version checks, decoding with kafka-python's
  `kafka.protocol` schemas, dispatch to the handlers;
- api_versions.py: what is served (api keys and versions);
- metadata.py, produce.py, fetch.py, list_offsets.py, offset_for_leader_epoch.py,
  delete_records.py, init_producer_id.py, topics.py, coordinator.py: the handlers;
  consumer_groups.py: the consumer groups this broker coordinates (membership, generations,
  assignments); fencing.py: the client's current leader epoch against the broker's (KIP-320);
- groups_admin.py (ListGroups, DescribeGroups), describe_configs.py (DescribeConfigs; and
  DescribeCluster in metadata.py): what admin tools read;
- records.py: RecordBatch v2 <-> Kaska batch transcoding; producer_ids.py: Kafka's producer
  id/epoch/sequence on Kaska's producer id and sequence; errors.py: error codes.
"""

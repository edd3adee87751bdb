"""The broker's network edge: sockets in, answers out; nothing here knows about logs or
replication beyond handing a request to its handler.

- acceptor.py: a listener's accept loop, its connection bound and drain (both listeners);
- connection_loop.py: what a connection of either listener does between requests (idle and
  stall bounds, interrupt, force close); connection.py: a Kaska connection (frames, dispatch to
  handlers/, deferred replies, sendfile);
- body.py: a request body read from the socket under a deadline, straight into a reusable
  buffer; reply.py: what a handler answers (a body, file slices, or a reply ready later);
- notifier.py: wakes long-polling fetches when a partition's high watermark moves;
- peer_gate.py: the door for replication frames (signed, fresh, in range).
"""

"""Kaska client library: `Admin`, `Producer` (idempotent, batching), `Consumer`, `Message`.

The wire protocol lives in `common.kaska.protocol`, the record batch format in
`common.kaska.record_batch`, the error taxonomy in `common.kaska.errors`.
"""

from common.kaska.admin import Admin
from common.kaska.consumer import Consumer
from common.kaska.message import Message
from common.kaska.producer import Producer

__all__ = ["Admin", "Consumer", "Message", "Producer"]

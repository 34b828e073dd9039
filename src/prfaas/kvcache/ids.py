"""Identifier types shared by every module of the cache pool and its callers.

NewTypes cost nothing at run time and let mypy catch a page id passed where a block id belongs.
Ids are issued by their owner (the pool numbers its blocks, pages and transfers; the deployment
names instances and clusters), never by a class-level counter.
"""

from __future__ import annotations

from typing import NewType

#: One allocated unit of the pool: an attention block or a state snapshot (one or more pages).
BlockId = NewType("BlockId", int)
#: One physical page of the pool's storage buffer, 0 <= page < num_pages.
PageId = NewType("PageId", int)
#: 64-bit chained identity of a prefix ending at a block boundary (see `hashing`).
BlockHash = NewType("BlockHash", int)
#: The caller's name for a request while it holds blocks.
RequestId = NewType("RequestId", str)
#: A pin on the blocks being shipped to another instance, released when the receiver acks.
TransferId = NewType("TransferId", int)
#: A serving instance (one pool) and the cluster it belongs to (PrfaaS or local PD).
InstanceId = NewType("InstanceId", str)
ClusterId = NewType("ClusterId", str)

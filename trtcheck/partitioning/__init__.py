"""The partitioning phase (the seed's segmentation, dependency analysis, and merge)."""

from trtcheck.partitioning.partition import Partition, Reason, ReasonKind, Segment, Target
from trtcheck.partitioning.partitioner import partition, partition_graph

__all__ = ["Partition", "Reason", "ReasonKind", "Segment", "Target", "partition", "partition_graph"]

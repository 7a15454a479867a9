"""The partitioning phase (the seed's segmentation, dependency analysis, and merge)."""

from trtcheck.partitioning.driver import partition, partition_graph
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Reason, ReasonKind, Target

__all__ = ["Partition", "Reason", "ReasonKind", "Segment", "Target", "partition", "partition_graph"]

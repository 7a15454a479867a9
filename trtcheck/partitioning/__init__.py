"""The partitioning phase: segmentation, dependency analysis and merging, as in Torch-TensorRT's partitioning design
(docs/partitioning.md says what that is and where trtcheck departs from it)."""

from trtcheck.partitioning.driver import partition, partition_graph
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Reason, ReasonKind, Target

__all__ = ["Partition", "Reason", "ReasonKind", "Segment", "Target", "partition", "partition_graph"]

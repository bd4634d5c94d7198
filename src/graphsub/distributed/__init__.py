"""Running graphsub's work past one process: :mod:`graphsub.distributed.executors` (one ordered parallel map over
serial, process-pool and Ray executors)."""

from graphsub.distributed.executors import EXECUTORS, check_executor, chunks, init_ray, map_ordered

__all__ = ["EXECUTORS", "check_executor", "chunks", "init_ray", "map_ordered"]

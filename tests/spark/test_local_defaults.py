"""The worker's in-process Spark is sized for one process, not for a cluster."""

from __future__ import annotations

import os

import pytest

from kafleet.spark.session import local_defaults


@pytest.mark.parametrize(
    ("master", "partitions"),
    [("local[2]", "2"), ("local[4,3]", "4"), ("local", "1"), ("local[*]", str(os.cpu_count()))],
)
def test_a_local_master_gets_as_many_shuffle_and_snapshot_partitions_as_it_has_cores(
    master: str, partitions: str
) -> None:
    assert local_defaults(master) == {
        "spark.sql.shuffle.partitions": partitions,
        "spark.databricks.delta.snapshotPartitions": partitions,
    }


@pytest.mark.parametrize("master", ["spark://spark:7077", "yarn", "k8s://https://api:6443"])
def test_a_cluster_master_keeps_sparks_own_defaults(master: str) -> None:
    assert local_defaults(master) == {}

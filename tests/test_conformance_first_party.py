"""core's conformance kit run against every first-party plugin: the built-ins and plugins/core-*.

Each class is what a plugin's own test suite holds (``class Test...(KindConformance): alias = ...``); they
live here until each plugin's tests directory takes its own. Plugins that need hardware this machine lacks
(cuda, mps, tpu) still run the checks that need no device; the others skip, saying why.
"""

from __future__ import annotations

import socket

from core import ClusterInfo
from core.testing import (
    AcceleratorConformance,
    CheckpointIOConformance,
    EnvironmentConformance,
    PrecisionConformance,
    StrategyConformance,
)

# -------------------------------------------------------------------------------------------------
# accelerators
# -------------------------------------------------------------------------------------------------


class TestCPUAccelerator(AcceleratorConformance):
    alias = "cpu"


class TestCUDAAccelerator(AcceleratorConformance):
    alias = "cuda"


class TestMPSAccelerator(AcceleratorConformance):
    alias = "mps"


class TestTPUAccelerator(AcceleratorConformance):
    alias = "tpu"


# -------------------------------------------------------------------------------------------------
# strategies: one job of real processes each
# -------------------------------------------------------------------------------------------------


class TestSingleDeviceStrategy(StrategyConformance):
    alias = "single_device"


class TestDDPStrategy(StrategyConformance):
    alias = "ddp"


class TestDDPSpawnStrategy(StrategyConformance):
    alias = "ddp_spawn"


class TestDDPForkStrategy(StrategyConformance):
    alias = "ddp_fork"


class TestFSDPStrategy(StrategyConformance):
    alias = "fsdp"


class TestDeepSpeedStrategy(StrategyConformance):
    alias = "deepspeed"


# -------------------------------------------------------------------------------------------------
# precisions
# -------------------------------------------------------------------------------------------------


class TestFull32Precision(PrecisionConformance):
    alias = "32-true"


class TestFull64Precision(PrecisionConformance):
    alias = "64-true"


class TestHalf16Precision(PrecisionConformance):
    alias = "16-true"


class TestBFloat16Precision(PrecisionConformance):
    alias = "bf16-true"


class TestMixed16Precision(PrecisionConformance):
    alias = "16-mixed"


class TestMixedBF16Precision(PrecisionConformance):
    alias = "bf16-mixed"


# -------------------------------------------------------------------------------------------------
# environments: the variables each launcher sets in global rank 3 of 2 nodes x 2 processes
# -------------------------------------------------------------------------------------------------


class TestLocalEnvironment(EnvironmentConformance):
    alias = "local"
    always_detects = True
    variables = {
        "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "NODE_RANK": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29510",
    }
    devices_per_node, num_nodes = 2, 2
    expected_cluster = ClusterInfo(world_size=4, global_rank=3, local_rank=1, node_rank=1, main_port=29510)
    mismatched_layout = (3, 2)


class TestTorchElasticEnvironment(EnvironmentConformance):
    alias = "torchelastic"
    variables = {
        "TORCHELASTIC_RUN_ID": "job-7", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1",
        "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511",
    }
    devices_per_node, num_nodes = 2, 2
    expected_cluster = ClusterInfo(world_size=4, global_rank=3, local_rank=1, node_rank=1, main_port=29511)
    mismatched_layout = (3, 2)


class TestSLURMEnvironment(EnvironmentConformance):
    alias = "slurm"
    variables = {
        "SLURM_JOB_ID": "1234", "SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "4",
        "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
        "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODELIST": "node[1-2]",
    }
    devices_per_node, num_nodes = 2, 2
    expected_cluster = ClusterInfo(
        world_size=4, global_rank=3, local_rank=1, node_rank=1, main_address="node1", main_port=16234
    )
    mismatched_layout = (3, 2)


class TestMPIEnvironment(EnvironmentConformance):
    alias = "mpi"
    variables = {
        "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512",
    }
    devices_per_node, num_nodes = 2, 2
    expected_cluster = ClusterInfo(world_size=4, global_rank=3, local_rank=1, node_rank=1, main_port=29512)
    mismatched_layout = (3, 2)


class TestLSFEnvironment(EnvironmentConformance):
    alias = "lsf"
    variables = {
        "LSB_JOBID": "1234", "JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_LOCAL_RANK": "1",
        "LSB_MCPU_HOSTS": f"launch 1 {socket.gethostname()} 2 other-node 2",
    }
    devices_per_node, num_nodes = 2, 2
    expected_cluster = ClusterInfo(
        world_size=4, global_rank=1, local_rank=1, node_rank=0, main_address=socket.gethostname(), main_port=10234
    )
    mismatched_layout = (3, 2)


class TestKubeflowEnvironment(EnvironmentConformance):
    alias = "kubeflow"
    auto_detected = False
    variables = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29513"}
    devices_per_node, num_nodes = 1, 2
    expected_cluster = ClusterInfo(world_size=2, global_rank=1, local_rank=0, node_rank=1, main_port=29513)
    mismatched_layout = (2, 2)


# -------------------------------------------------------------------------------------------------
# checkpoint_io
# -------------------------------------------------------------------------------------------------


class TestTorchCheckpointIO(CheckpointIOConformance):
    alias = "torch"


class TestDistributedCheckpointIO(CheckpointIOConformance):
    alias = "distributed"

"""tokenizers' share of the cores in a build's processes (pipeline/foundation/threads.py,
contract/executor.tokenizer_threads)."""

import os

import pytest

from cpp_data.pipeline.contract.executor import ExecutorConfig, tokenizer_threads
from cpp_data.pipeline.foundation import threads


@pytest.fixture
def clean_env(monkeypatch):
    for name in (threads.SWITCH, threads.POOL):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_ours", {})
    return monkeypatch


def test_one_thread_switches_parallelism_off_and_more_size_the_pool(clean_env):
    threads.limit_tokenizer_threads(1)
    assert os.environ[threads.SWITCH] == "false" and threads.POOL not in os.environ
    threads.limit_tokenizer_threads(4)  # a later build in the same process with a wider share
    assert threads.SWITCH not in os.environ and os.environ[threads.POOL] == "4"
    threads.limit_tokenizer_threads(1)
    assert os.environ[threads.SWITCH] == "false" and threads.POOL not in os.environ


def test_a_users_own_setting_is_kept(clean_env):
    clean_env.setenv(threads.SWITCH, "true")
    clean_env.setenv(threads.POOL, "3")
    threads.limit_tokenizer_threads(1)
    assert os.environ[threads.SWITCH] == "true" and os.environ[threads.POOL] == "3"


def test_the_share_is_the_cores_over_the_processes_running_at_once(monkeypatch):
    monkeypatch.setattr(threads, "cpu_count", lambda: 8)
    assert tokenizer_threads(ExecutorConfig(workers=8)) == 1
    assert tokenizer_threads(ExecutorConfig(workers=2)) == 4
    assert tokenizer_threads(ExecutorConfig(workers=1)) == 8
    assert tokenizer_threads(ExecutorConfig(workers=2), beside=True) == 2  # the trainer beside two workers
    assert tokenizer_threads(ExecutorConfig(workers=8), beside=True) == 1
    assert tokenizer_threads(ExecutorConfig(kind="ray", workers=8, ray={"cpus_per_task": 2})) == 2
    assert tokenizer_threads(ExecutorConfig(kind="ray", workers=8), beside=True) == 1  # a Ray started here
    assert tokenizer_threads(ExecutorConfig(kind="ray", workers=8, ray_address="10.0.0.1:6379"), beside=True) == 8
    assert tokenizer_threads(ExecutorConfig(kind="slurm", workers=64), beside=True) == 8
    assert tokenizer_threads(ExecutorConfig(kind="slurm", workers=64)) == 1

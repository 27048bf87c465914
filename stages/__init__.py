"""The stages of the DAG, one module each; STAGES maps a recipe's stage names to their classes."""

from cpp_data.stages.collect import Collect
from cpp_data.stages.exact_dedup import ExactDedup
from cpp_data.stages.filter import Filter
from cpp_data.stages.ledger import Ledger
from cpp_data.stages.license import License
from cpp_data.stages.near_dedup import NearDedup
from cpp_data.stages.shards import Shards

STAGES = {cls.name: cls for cls in (Collect, Filter, License, ExactDedup, NearDedup, Shards, Ledger)}

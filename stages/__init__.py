"""The stages of the DAG, one module each; STAGES maps a recipe's stage names to their classes."""

from cpp_data.stages.collect import Collect
from cpp_data.stages.context_graph import ContextGraph
from cpp_data.stages.decontaminate import Decontaminate
from cpp_data.stages.dependency_documents import DependencyDocuments
from cpp_data.stages.exact_dedup import ExactDedup
from cpp_data.stages.filter import Filter
from cpp_data.stages.ledger import Ledger
from cpp_data.stages.launch_spec import LaunchSpecStage
from cpp_data.stages.license import License
from cpp_data.stages.megatron_export import MegatronExport
from cpp_data.stages.near_dedup import NearDedup
from cpp_data.stages.packed_rows import PackedRows
from cpp_data.stages.semantics import Semantics
from cpp_data.stages.shards import Shards
from cpp_data.stages.structure import Structure
from cpp_data.stages.token_columns import TokenColumns
from cpp_data.stages.tokenizer import TokenizerStage

STAGES = {cls.name: cls for cls in (Collect, Filter, Decontaminate, License, ExactDedup, NearDedup, Shards, Structure, TokenizerStage,
                                    TokenColumns, MegatronExport, PackedRows, LaunchSpecStage, Semantics, ContextGraph,
                                    DependencyDocuments, Ledger)}

"""One micro batch's loss, for either model: mean next-token cross-entropy over loss_mask, bf16 autocast on CUDA.

`micro_batch_loss(model, batch, device, packed, forward)` moves GPTDataset's batch to the device and calls
`forward(model, tokens, position_ids, attention_mask, labels, loss_mask, isolate, autocast)`, which is
`plain_loss` (harness/plain_model.py) or `megatron_loss` (megatron-core's GPTModel, harness/model.py). Packed
rows isolate their documents (`isolate`), built from the position ids inside the forward; a batch that carries
GPTDataset's own masks (`--attention local`) passes them instead. A batch whose every row has its loss in its
first document alone (one document, then padding: most rows of a long lane) is not isolated: causal attention
over the whole row gives that document the same outputs and the loss the same gradients (nothing after the
first document carries loss, and nothing before it is another document), and the causal kernel (cuDNN,
FlashAttention) is faster than a document mask at long rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from megatron.core.packed_seq_params import PackedSeqParams

from cpp_data.harness.attention import Documents, document_segments, documents


@dataclass
class DocumentParams(PackedSeqParams):
    """megatron-core's packed_seq_params (which GPTModel hands to core_attention untouched when qkv_format is
    not 'thd'), carrying the batch's Documents to harness/attention.SDPAAttention."""

    documents: Documents | None = None


def segments(position_ids: torch.Tensor, device: torch.device) -> PackedSeqParams:
    """megatron-core's own PackedSeqParams naming the documents of packed rows (cu_seqlens from the host), which
    SDPAAttention also accepts: for a caller that builds megatron-core's inputs itself (tests/test_harness.py)."""
    cu = document_segments(position_ids).to(device, non_blocking=True)
    s = position_ids.shape[-1]
    return PackedSeqParams(qkv_format="sbhd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=s, max_seqlen_kv=s)


def plain_loss(model, tokens, position_ids, attention_mask, labels, loss_mask, isolate: bool,
               autocast: bool) -> torch.Tensor:
    """The plain model's loss (it computes it itself: harness/plain_model.head_loss)."""
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=autocast):
        return model(tokens, position_ids, labels=labels, loss_mask=loss_mask, attention_mask=attention_mask,
                     isolate=isolate)


def megatron_loss(model, tokens, position_ids, attention_mask, labels, loss_mask, isolate: bool,
                  autocast: bool) -> torch.Tensor:
    """GPTModel's logits, then the loss here rather than in megatron-core, so that torch.compile fuses the
    bf16-to-fp32 cast and the log-softmax into one pass over the logits instead of megatron-core's several fp32
    copies (bench/results: gpu-h200-speed.json).

    The loss runs in the output layer's own [s, b] order (labels and mask transposed, not the logits): GPTModel
    hands the logits back as [b, s] (`transpose(0, 1).contiguous()`), and a loss taken in that order sends the
    output layer a transposed gradient, which compiled into a batched matmul of s products of b rows each for
    its input gradient (22 ms per micro batch of 32 on an H200, against ~8 ms for the same FLOPs as one matmul;
    bench/results/gpu-h200-profile.txt). Compiled, the two transposes cancel and no copy is made."""
    s = tokens.shape[1]  # the rotary table's length, which GPTModel reads from packed_seq_params
    params = DocumentParams(qkv_format="sbhd", max_seqlen_q=s, max_seqlen_kv=s,
                            documents=documents(position_ids)) if isolate else None
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=tokens, position_ids=position_ids, attention_mask=attention_mask,
                       packed_seq_params=params)
    logits = logits.transpose(0, 1).flatten(0, 1)  # [s * b, vocab]
    losses = F.cross_entropy(logits.float(), labels.t().flatten(), reduction="none")
    mask = loss_mask.t().flatten().float()
    return (losses * mask).sum() / mask.sum().clamp(min=1)


def loss_in_first_documents(position_ids: torch.Tensor, loss_mask: torch.Tensor) -> bool:
    """True when no row carries loss after its first document ends (position ids restart at each document):
    then isolating documents changes no output the loss reads. Read on the host's copy of the batch."""
    later = (position_ids[:, 1:] == 0).cumsum(1) > 0  # at or after the row's second document
    return not bool((later & (loss_mask[:, 1:] != 0)).any())


def micro_batch_loss(model, batch: dict, device: torch.device, packed: bool, forward) -> torch.Tensor:
    """Mean loss over one micro batch of GPTDataset samples (tokens, labels, loss_mask, position_ids, and
    attention_mask when GPTDataset made its masks)."""
    host = {k: v for k, v in batch.items() if k != "dataset_id"}
    if packed:  # a packed row's last label is the first id of another row (harness/data.py)
        host["loss_mask"] = host["loss_mask"].clone()
        host["loss_mask"][:, -1] = 0
    isolate = packed and "attention_mask" not in host and not loss_in_first_documents(host["position_ids"],
                                                                                         host["loss_mask"])
    b = {k: v.to(device, non_blocking=True) for k, v in host.items()}
    mask = b["loss_mask"]
    return forward(model, b["tokens"], b["position_ids"], b.get("attention_mask"), b["labels"], mask, isolate,
                   device.type == "cuda")

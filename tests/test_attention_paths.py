"""The harness's attention paths for packed rows agree with SDPA over the explicit document mask (issue 60).

Batches: packed rows of several documents each, made the way GPTDataset makes them (position ids restart after
every EOD; a row that is one document; documents ending exactly on a 128-token block boundary; an EOD-padded
tail, i.e. one-token documents). Paths:
- the document BlockMask flex_attention runs on (harness/doc_mask.py): its partial and full blocks are the dense
  mask's, it equals create_block_mask's, and the mask it denotes (full blocks whole, partial blocks through its
  mask function) is the document mask;
- flex_attention's output with it (CPU: forward only; flex_attention has no CPU backward in this torch, so its
  own gradients are checked on CUDA: the tests marked cuda here, and bench/gpu_exactness.py in the device call);
- the models: the plain GPT and megatron-core's GPTModel with the harness's attention (documents from the
  position ids) against megatron-core's own unfused attention with GPTDataset-style masks, same weights: loss
  and every parameter's gradient, fp32; and the plain model compiled block by block, with and without
  activation checkpointing, against itself uncompiled.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cpp_data.harness.attention import Documents, attend, document_segments, documents, segments_mask
from cpp_data.harness.doc_mask import BLOCK, doc_block_mask, doc_block_masks, doc_dense_mask, doc_ids

EOD = 2
CUDA = torch.cuda.is_available()


def gpt_dataset_positions(tokens: torch.Tensor) -> torch.Tensor:
    """GPTDataset's reset_position_ids (_get_ltor_masks_and_position_ids): positions restart after every EOD."""
    b, s = tokens.shape
    pos = torch.arange(s).repeat(b, 1)
    for r in range(b):
        prev = 0
        for i in torch.nonzero(tokens[r] == EOD).flatten().tolist():
            pos[r, i + 1:] -= i + 1 - prev
            prev = i + 1
    return pos


def packed_rows(b: int, s: int, seed: int, vocab: int = 100) -> torch.Tensor:
    """Rows of EOD-terminated documents of 1 to 200 tokens, some ending on a block boundary, some running over the
    row's end (cut there); row 0 one document over the whole row, the last row's last 70 ids EOD."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(b):
        row: list[int] = []
        while len(row) < s:
            kind = int(torch.randint(0, 8, (1,), generator=g))  # mostly short and medium documents
            n = {0: 1, 1: BLOCK - len(row) % BLOCK, 2: int(torch.randint(2, 60, (1,), generator=g)),
                 4: s + 50 if row else 1}.get(kind, int(torch.randint(60, 200, (1,), generator=g)))
            row += torch.randint(3, vocab, (max(n - 1, 0),), generator=g).tolist() + [EOD]
        rows.append(row[:s])
    rows[-1][-70:] = [EOD] * 70
    rows[0] = torch.randint(3, vocab, (s,), generator=g).tolist()
    return torch.tensor(rows)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30)).item()


def _qkv(b: int, h: int, s: int, d: int, seed: int, dtype=torch.float32, device="cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g).to(device=device, dtype=dtype).requires_grad_() for _ in range(3)]


def _documents(b: int, s: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(position ids, document numbers) of packed rows."""
    pos = gpt_dataset_positions(packed_rows(b, s, seed))
    return pos, doc_ids(pos)


# ---- the masks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_document_numbers_are_gpt_datasets_documents(seed):
    """doc_ids opens a new number after every EOD, and megatron-core's cu_seqlens cut the same documents."""
    tokens = packed_rows(3, 512, seed)
    pos = gpt_dataset_positions(tokens)
    doc = doc_ids(pos)
    for r in range(tokens.shape[0]):
        ends = torch.nonzero(tokens[r, :-1] == EOD).flatten()
        assert torch.equal(doc[r, ends + 1], doc[r, ends] + 1)
        assert int(doc[r, -1]) == 1 + len(ends)
    assert torch.equal(segments_mask(document_segments(pos), *pos.shape), doc_dense_mask(doc))
    assert (doc[1:-1, -1] >= 3).all()  # rows of several documents (besides the padded one)


@pytest.mark.parametrize("seed", range(6))
def test_block_masks_are_the_dense_masks_blocks(seed):
    """partial = blocks with some but not all pairs allowed, full = blocks with all allowed."""
    _, doc = _documents(4, 1024, seed)
    partial, full = doc_block_masks(doc)
    b, s = doc.shape
    nb = s // BLOCK
    blocks = doc_dense_mask(doc).view(b, 1, nb, BLOCK, nb, BLOCK).transpose(3, 4)
    some, every = blocks.any(-1).any(-1), blocks.all(-1).all(-1)
    assert torch.equal(full, every)
    assert torch.equal(partial, some & ~every)
    assert full.any() and partial.any() and (~some).any()  # the batch has all three kinds of block


@pytest.mark.parametrize("seed", range(3))
def test_block_mask_equals_create_block_mask(seed):
    from torch.nn.attention.flex_attention import create_block_mask

    _, doc = _documents(3, 512, seed)
    ours = doc_block_mask(doc)
    theirs = create_block_mask(lambda b, h, q, kv: (q >= kv) & (doc[b, q] == doc[b, kv]), 3, None, 512, 512,
                               device="cpu", BLOCK_SIZE=BLOCK)
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    for a, t in ((ours.kv_num_blocks, theirs.kv_num_blocks), (ours.full_kv_num_blocks, theirs.full_kv_num_blocks),
                 (ours.q_num_blocks, theirs.q_num_blocks), (ours.full_q_num_blocks, theirs.full_q_num_blocks)):
        assert torch.equal(a.expand_as(t), t)


def _denoted(block_mask, b: int, s: int) -> torch.Tensor:
    """The [b, 1, s, s] mask a BlockMask makes flex_attention compute: a full block wholly, a partial block where its
    mask function allows, any other block not at all."""
    nb = s // BLOCK
    partial = torch.zeros(b, 1, nb, nb, dtype=torch.bool)
    full = torch.zeros(b, 1, nb, nb, dtype=torch.bool)
    for kept, num, idx in ((partial, block_mask.kv_num_blocks, block_mask.kv_indices),
                           (full, block_mask.full_kv_num_blocks, block_mask.full_kv_indices)):
        for r in range(b):
            for i in range(nb):
                kept[r, 0, i, idx[r, 0, i, :num[r, 0, i]].long()] = True
    q = torch.arange(s)[:, None]
    kv = torch.arange(s)[None, :]
    allowed = torch.stack([block_mask.mask_mod(torch.tensor(r), torch.tensor(0), q, kv) for r in range(b)])[:, None]
    up = lambda m: m.repeat_interleave(BLOCK, -1).repeat_interleave(BLOCK, -2)  # noqa: E731
    return up(full) | (up(partial) & allowed)


@pytest.mark.parametrize("seed", range(3))
def test_the_block_mask_denotes_the_document_mask(seed):
    """What flex_attention computes with the BlockMask, read off its blocks and mask function, is the causal
    document mask: so its outputs and gradients are SDPA's with that mask (checked here on CPU for the forward;
    the backward on CUDA)."""
    _, doc = _documents(3, 640, seed)
    assert torch.equal(_denoted(doc_block_mask(doc), 3, 640), doc_dense_mask(doc))


# ---- attention outputs and gradients -----------------------------------------------------------------------

@pytest.mark.parametrize("compiled", [False, True])
def test_flex_forward_equals_sdpa_with_the_document_mask(compiled):
    from torch.nn.attention.flex_attention import flex_attention

    _, doc = _documents(3, 512, 7)
    q, k, v = (t.detach() for t in _qkv(3, 4, 512, 32, 0))
    fn = torch.compile(flex_attention) if compiled else flex_attention
    with torch.no_grad():
        out = fn(q, k, v, block_mask=doc_block_mask(doc))
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=doc_dense_mask(doc))
    assert rel(out, want) < 1e-5


def test_cpu_attention_path_outputs_and_gradients():
    """`attend` with the Documents of packed rows (CPU: SDPA over the mask `documents` builds) against float64
    attention written out (scores, mask, softmax), outputs and the gradients of q, k and v."""
    pos, doc = _documents(3, 384, 3)
    q, k, v = _qkv(3, 4, 384, 32, 1)
    docs = documents(pos)
    assert docs.block_mask is None and docs.mask is not None  # on CPU
    out = attend(q, k, v, docs, 32 ** -0.5)
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    scores = (q64 @ k64.transpose(-1, -2) * 32 ** -0.5).masked_fill(~doc_dense_mask(doc), float("-inf"))
    want = scores.softmax(-1) @ v64
    want_grads = torch.autograd.grad(want, (q64, k64, v64), go.double())
    assert rel(out, want) < 1e-5
    for g, w in zip(grads, want_grads):
        assert rel(g, w) < 1e-5


def test_no_documents_is_causal_over_the_row():
    q, k, v = (t.detach() for t in _qkv(2, 2, 256, 16, 4))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(256, 256, dtype=torch.bool).tril())
    assert rel(attend(q, k, v, None, 16 ** -0.5), want) < 1e-5


def test_compiled_flex_with_v_in_q_layout():
    """torch 2.13 on CPU: flex_attention compiled in a graph where q and k are intermediates and v a strided slice
    of an input returned wrong outputs (relative error ~1.4); both models copy v to q's layout first, which is
    right (this test)."""
    from torch.nn.attention.flex_attention import flex_attention

    pos, doc = _documents(2, 256, 11)
    qkv = torch.randn(2, 256, 4, 192, generator=torch.Generator().manual_seed(5))

    def f(qkv, doc):
        q, k, v = qkv.split(64, -1)
        return flex_attention((q * 1.0).transpose(1, 2), (k * 1.0).transpose(1, 2), v.contiguous().transpose(1, 2),
                              block_mask=doc_block_mask(doc))

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(f)(qkv, doc)
        q, k, v = (t.transpose(1, 2) for t in qkv.split(64, -1))
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=doc_dense_mask(doc))
    assert rel(out, want) < 1e-5


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("seed", range(2))
def test_cuda_flex_outputs_and_gradients(seed):
    """bf16 flex_attention (the training path) against fp32 SDPA with the document mask: out, dq, dk, dv within
    2x the error of SDPA's own bf16 masked kernel (bf16 operands land between 1e-3 and 1e-2)."""
    pos, doc = _documents(4, 1024, 100 + seed)
    docs = documents(pos.cuda())
    assert docs.block_mask is not None
    q, k, v = _qkv(4, 12, 1024, 64, seed, torch.bfloat16, "cuda")
    out = attend(q, k, v, docs, 0.125)
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    mask = doc_dense_mask(doc.cuda())
    errs, base_errs = [], []
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    want = F.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask, scale=0.125)
    want_grads = torch.autograd.grad(want, (q32, k32, v32), go.float())
    qb, kb, vb = (t.detach().requires_grad_() for t in (q, k, v))
    base = attend(qb, kb, vb, Documents(mask=mask), 0.125)
    base_grads = torch.autograd.grad(base, (qb, kb, vb), go)
    errs = [rel(out, want)] + [rel(g, w) for g, w in zip(grads, want_grads)]
    base_errs = [rel(base, want)] + [rel(g, w) for g, w in zip(base_grads, want_grads)]
    for e, be in zip(errs, base_errs):
        assert e < 2e-2 and e <= 2 * be + 1e-3, (errs, base_errs)


# ---- the models --------------------------------------------------------------------------------------------

SEQ, VOCAB = 256, 1000


@pytest.fixture(scope="module")
def megatron_state():
    from cpp_data.harness.megatron_cpu import apply_cpu_patches
    from cpp_data.harness.train import init_distributed

    apply_cpu_patches()
    init_distributed(torch.device("cpu"), 0)


def _batch(b: int = 3, seed: int = 11):
    tokens = packed_rows(b, SEQ + 1, seed, vocab=VOCAB)
    inputs = tokens[:, :-1].contiguous()
    mask = (inputs != EOD).float()
    mask[:, -1] = 0
    return inputs, gpt_dataset_positions(inputs), tokens[:, 1:].contiguous(), mask


def _models(*impls: str, recompute: bool = False):
    """Models of the 'small' preset with the first one's weights."""
    from cpp_data.harness.checkpoint import load_weights
    from cpp_data.harness.model import build_model

    torch.manual_seed(0)
    out = []
    for impl in impls:
        attention = "local" if impl == "local" else "sdpa"
        model, _ = build_model("small", VOCAB, SEQ, torch.device("cpu"), attention=attention,
                               impl="plain" if impl == "plain" else "megatron", recompute=recompute)
        if out:
            load_weights(model, out[0].state_dict())
        out.append(model)
    return out


def _loss_and_grads(model, forward, batch, isolate: bool, attention_mask=None):
    model.zero_grad(set_to_none=True)
    tokens, pos, labels, mask = batch
    loss = forward(model, tokens, pos, attention_mask, labels, mask, isolate, False)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_same(a, b, tol: float = 1e-4):
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    assert abs(loss_a - loss_b) < 1e-5 * abs(loss_b), (loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys()
    worst = max((rel(grads_a[n], grads_b[n]), n) for n in grads_b)
    assert worst[0] < tol, worst


def test_models_agree_with_megatron_cores_own_attention(megatron_state):
    """Same weights, a packed batch of several documents per row: the plain model and megatron-core's GPTModel
    with the harness's attention (documents from the position ids) give megatron-core's unfused attention's loss
    and gradients with GPTDataset-style masks ([b, 1, s, s], True = masked out); and causal over whole rows."""
    from cpp_data.harness.loss import megatron_loss, plain_loss

    local, megatron, plain = _models("local", "megatron", "plain")
    batch = _batch()
    gold = _loss_and_grads(local, megatron_loss, batch, False, attention_mask=~doc_dense_mask(doc_ids(batch[1])))
    _assert_same(_loss_and_grads(megatron, megatron_loss, batch, True), gold)
    _assert_same(_loss_and_grads(plain, plain_loss, batch, True), gold)
    whole = _loss_and_grads(megatron, megatron_loss, batch, False)
    _assert_same(_loss_and_grads(plain, plain_loss, batch, False), whole)
    assert abs(whole[0] - gold[0]) > 1e-3  # isolation changes the loss: the batch's documents are not alone


def test_plain_model_compiled_and_checkpointed_is_the_same_function(megatron_state):
    """compile_regions (each block and the loss head compiled) and activation checkpointing change neither the
    loss nor the gradients, over batches of other document layouts (no recompilation per batch)."""
    from torch._dynamo.utils import counters

    from cpp_data.harness.loss import plain_loss

    eager, compiled = _models("plain", "plain")
    (checkpointed,) = _models("plain", recompute=True)
    checkpointed.load_state_dict(eager.state_dict())
    torch._dynamo.reset()
    counters.clear()
    compiled.compile_regions()
    for seed in range(3):
        batch = _batch(seed=seed)
        want = _loss_and_grads(eager, plain_loss, batch, True)
        _assert_same(_loss_and_grads(compiled, plain_loss, batch, True), want)
        _assert_same(_loss_and_grads(checkpointed, plain_loss, batch, True), want, tol=1e-6)
    assert counters["stats"]["unique_graphs"] == 2  # one block for every layer, and the loss head


def _one_document_rows(second_document_loss: bool) -> dict:
    """Two rows of 64 ids: a document, then EOD padding (one-token documents) that carries no loss; with
    `second_document_loss`, the second row holds a second real document whose tokens carry loss."""
    torch.manual_seed(5)
    tokens = torch.randint(3, 200, (2, 64))
    tokens[0, 40:] = EOD
    tokens[1, 30] = EOD
    tokens[1, 50:] = EOD
    mask = (tokens != EOD).long()
    if not second_document_loss:
        mask[1, 31:] = 0
    return {"tokens": tokens, "position_ids": gpt_dataset_positions(tokens), "labels": tokens.roll(-1, 1),
            "loss_mask": mask}


@pytest.mark.parametrize("second_document_loss", [False, True])
def test_a_batch_with_loss_only_in_first_documents_skips_isolation_exactly(second_document_loss):
    """harness/loss.py runs a batch causally when every row's loss lies in its first document: the loss and
    every gradient equal the isolated ones then, and a batch with loss in a second document stays isolated
    (where causal attention would give another loss)."""
    from cpp_data.harness.loss import loss_in_first_documents
    from cpp_data.harness.plain_model import PlainGPT
    from cpp_data.harness.presets import SIZES

    b = _one_document_rows(second_document_loss)
    assert loss_in_first_documents(b["position_ids"], b["loss_mask"]) is (not second_document_loss)
    torch.manual_seed(0)
    model = PlainGPT(SIZES["tiny"], 256, 64)
    results = []
    for isolate in (True, False):
        model.zero_grad()
        loss = model(b["tokens"], b["position_ids"], labels=b["labels"], loss_mask=b["loss_mask"], isolate=isolate)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (isolated, g_iso), (causal, g_causal) = results
    same = torch.allclose(isolated, causal, atol=1e-6) and all(
        torch.allclose(a, c, atol=1e-6) for a, c in zip(g_iso, g_causal))
    assert same is (not second_document_loss)


def test_compiling_both_attention_paths_leaves_no_gradient():
    """harness/train.py runs one step of each attention path before training (compiled, on CUDA); here, eager on
    CPU: both paths run on synthetic rows and leave no gradient behind for the first real step."""
    from cpp_data.harness.loss import plain_loss
    from cpp_data.harness.plain_model import PlainGPT
    from cpp_data.harness.presets import SIZES
    from cpp_data.harness.train import _compile_attention_paths

    model = PlainGPT(SIZES["tiny"], 256, 64)
    _compile_attention_paths(model, plain_loss, 2, 64, torch.device("cpu"))
    assert all(p.grad is None for p in model.parameters())
